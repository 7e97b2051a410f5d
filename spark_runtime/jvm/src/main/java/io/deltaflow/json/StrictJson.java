package io.deltaflow.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * The strict half of JSON routing: is a record's value exactly one JSON object (RFC 8259), and
 * does it give no value Spark's from_json would silently reinterpret?
 *
 * <p>Spark's from_json stops after the first object (a second one after it is dropped), accepts
 * single quotes and NaN, takes the last of duplicate keys and reads a number given for a
 * TIMESTAMP as epoch seconds (epoch milliseconds land in year 55,800). The runtime calls
 * {@link #check} through Spark's {@code java_method} on every JSON record that passed the cheap
 * checks and routes on its answer; from_json then only converts what this accepted.
 *
 * <p>Jackson's defaults are RFC 8259: no comments, single quotes, unquoted names, NaN/Infinity,
 * leading zeros, trailing commas or raw control characters; whitespace is space, tab, LF, CR.
 * Duplicate keys are refused at every depth. The walk follows the table's schema (Spark's
 * StructType JSON) only to find numbers at TIMESTAMP and DATE positions and to see whether any
 * top-level field of the schema is present; every other type question is from_json's.
 */
public final class StrictJson {
  /** Reason prefixes, as the runtime's Reason enum spells them. */
  public static final String MALFORMED = "malformed_json";

  public static final String MISMATCH = "schema_mismatch";

  /** The answer for a value that may be parsed. */
  public static final String OK = "";

  private static final JsonFactory FACTORY =
      JsonFactory.builder()
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          .enable(StreamReadFeature.INCLUDE_SOURCE_IN_LOCATION)
          .build();
  private static final ObjectMapper MAPPER = new ObjectMapper();
  // The schema literal is the same text on every row (a new String each time): the last one
  // parsed is kept, and an equals() finds it without hashing the text on every row.
  private static volatile Schema last;

  private record Schema(String json, Node root) {}

  private StrictJson() {}

  /**
   * The empty string when {@code text} is one strict JSON object that fits (java_method turns a
   * null result into the text "null"); otherwise {@code "<reason>\t<detail>"}, the reason being
   * malformed_json or schema_mismatch.
   */
  public static String check(String text, String schemaJson) {
    if (text == null) {
      return OK; // tombstones are the cheap checks' concern
    }
    Node root = schema(schemaJson);
    try (JsonParser parser = FACTORY.createParser(text)) {
      JsonToken first = parser.nextToken();
      if (first == null) {
        return MALFORMED + "\tvalue is empty or whitespace only";
      }
      if (first != JsonToken.START_OBJECT) {
        return MALFORMED + "\tvalue is a JSON " + kind(first) + ", not an object";
      }
      Walk walk = new Walk(text.indexOf("\\u") >= 0);
      int known = walk.object(parser, root, "");
      JsonToken after = parser.nextToken();
      if (after != null) {
        return MALFORMED
            + "\ttrailing data after the object at character "
            + (parser.currentTokenLocation().getCharOffset() + 1)
            + " (one record must hold exactly one JSON object)";
      }
      if (walk.problem != null) {
        return walk.problem;
      }
      if (known == 0 && !root.fields.isEmpty()) {
        return MISMATCH
            + "\tthe object has none of the schema's fields ("
            + String.join(", ", root.fields.keySet())
            + "): wrong topic or wrong spec.format.schema?";
      }
      return OK;
    } catch (JsonProcessingException error) {
      return MALFORMED + "\t" + describe(error);
    } catch (IOException error) {
      return MALFORMED + "\t" + error.getMessage();
    }
  }

  private static String describe(JsonProcessingException error) {
    String message = error.getOriginalMessage();
    if (message == null) {
      message = String.valueOf(error.getMessage());
    }
    int cut = message.indexOf('\n');
    message = cut >= 0 ? message.substring(0, cut) : message;
    if (error.getLocation() != null && error instanceof JsonParseException) {
      message += " (at character " + (error.getLocation().getCharOffset() + 1) + ")";
    }
    return message;
  }

  private static String kind(JsonToken token) {
    switch (token) {
      case START_ARRAY:
        return "array";
      case VALUE_STRING:
        return "string";
      case VALUE_NUMBER_INT:
      case VALUE_NUMBER_FLOAT:
        return "number";
      case VALUE_TRUE:
      case VALUE_FALSE:
        return "boolean";
      case VALUE_NULL:
        return "null";
      default:
        return token.name();
    }
  }

  private static Node schema(String schemaJson) {
    Schema known = last;
    if (known != null && known.json().equals(schemaJson)) {
      return known.root();
    }
    try {
      Node root = Node.of(MAPPER.readTree(schemaJson));
      last = new Schema(schemaJson, root);
      return root;
    } catch (JsonProcessingException error) {
      throw new IllegalArgumentException("not a Spark schema: " + error.getMessage(), error);
    }
  }

  /** The part of a Spark type the walk needs. */
  private static final class Node {
    static final Node OTHER = new Node(Kind.OTHER, "");

    enum Kind {
      STRUCT,
      ARRAY,
      MAP,
      TEMPORAL,
      DECIMAL,
      DOUBLE,
      FLOAT,
      OTHER
    }

    final Kind kind;
    final String label; // the SQL type name of a leaf node, for the dead letter's detail
    int scale; // DECIMAL: digits kept after the point
    final Map<String, Node> fields = new LinkedHashMap<>();
    Node element = OTHER; // array element or map value

    Node(Kind kind, String label) {
      this.kind = kind;
      this.label = label;
    }

    static Node of(JsonNode type) {
      if (type.isTextual()) {
        String name = type.asText();
        String label = name.toUpperCase(Locale.ROOT);
        if (name.startsWith("timestamp") || name.equals("date")) {
          return new Node(Kind.TEMPORAL, label);
        }
        if (name.equals("double")) {
          return new Node(Kind.DOUBLE, label);
        }
        if (name.equals("float")) {
          return new Node(Kind.FLOAT, label);
        }
        if (name.startsWith("decimal(")) {
          Node node = new Node(Kind.DECIMAL, label);
          node.scale = Integer.parseInt(name.substring(name.indexOf(',') + 1, name.indexOf(')')));
          return node;
        }
        return OTHER;
      }
      String name = type.path("type").asText();
      if (name.equals("struct")) {
        Node node = new Node(Kind.STRUCT, "");
        for (JsonNode field : type.path("fields")) {
          node.fields.put(field.path("name").asText(), of(field.path("type")));
        }
        return node;
      }
      if (name.equals("array")) {
        Node node = new Node(Kind.ARRAY, "");
        node.element = of(type.path("elementType"));
        return node;
      }
      if (name.equals("map")) {
        Node node = new Node(Kind.MAP, "");
        node.element = of(type.path("valueType"));
        return node;
      }
      return OTHER;
    }
  }

  /** One record's walk; remembers the first problem that is not a parse error. */
  private static final class Walk {
    final boolean escapes; // only a value with \\u escapes can hold a lone surrogate
    String problem;

    Walk(boolean escapes) {
      this.escapes = escapes;
    }

    /** Walks an object whose START_OBJECT was read; returns how many schema fields it holds. */
    int object(JsonParser parser, Node type, String path) throws IOException {
      int known = 0;
      for (JsonToken token = parser.nextToken();
          token != JsonToken.END_OBJECT;
          token = parser.nextToken()) {
        String name = parser.currentName();
        surrogates(name, "");
        Node child = Node.OTHER;
        if (type.kind == Node.Kind.STRUCT) {
          Node field = type.fields.get(name);
          if (field != null) {
            known++;
            child = field;
          }
        } else if (type.kind == Node.Kind.MAP) {
          child = type.element;
        }
        value(parser, parser.nextToken(), child, path + name);
      }
      return known;
    }

    void value(JsonParser parser, JsonToken token, Node type, String path) throws IOException {
      if (type.kind == Node.Kind.TEMPORAL
          && (token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT)) {
        note(
            MISMATCH
                + "\t"
                + path
                + " ("
                + type.label
                + ") is the number "
                + parser.getText()
                + ": give an ISO-8601 string such as "
                + (type.label.equals("DATE") ? "\"2026-01-31\"" : "\"2026-01-31T12:00:00Z\"")
                + " (epoch seconds and milliseconds cannot be told apart)");
        return;
      }
      if (token == JsonToken.VALUE_NUMBER_INT || token == JsonToken.VALUE_NUMBER_FLOAT) {
        number(parser, type, path);
        return;
      }
      switch (token) {
        case START_OBJECT:
          object(parser, type, path + ".");
          break;
        case START_ARRAY:
          Node element = type.kind == Node.Kind.ARRAY ? type.element : Node.OTHER;
          for (JsonToken t = parser.nextToken(); t != JsonToken.END_ARRAY; t = parser.nextToken()) {
            value(parser, t, element, path + "[]");
          }
          break;
        case VALUE_STRING:
          surrogates(parser, path);
          break;
        default:
          break;
      }
    }

    /** Numbers Spark would change silently: rounded to a DECIMAL's scale, or overflowing to
     * Infinity in a DOUBLE or FLOAT. */
    void number(JsonParser parser, Node type, String path) throws IOException {
      if (type.kind == Node.Kind.DECIMAL) {
        BigDecimal value = parser.getDecimalValue().stripTrailingZeros();
        if (value.scale() > type.scale) {
          note(
              MISMATCH
                  + "\t"
                  + path
                  + " ("
                  + type.label
                  + ") is "
                  + parser.getText()
                  + ": more digits after the point than the column keeps, and rounding would"
                  + " change the value");
        }
      } else if (type.kind == Node.Kind.DOUBLE || type.kind == Node.Kind.FLOAT) {
        double value = parser.getDoubleValue();
        boolean overflow =
            type.kind == Node.Kind.DOUBLE
                ? Double.isInfinite(value)
                : Float.isInfinite((float) value);
        if (overflow) {
          note(
              MISMATCH
                  + "\t"
                  + path
                  + " ("
                  + type.label
                  + ") is "
                  + parser.getText()
                  + ": beyond the column's range, it would be stored as Infinity");
        }
      }
    }

    void surrogates(JsonParser parser, String path) throws IOException {
      if (escapes) {
        surrogates(parser.getText(), path);
      }
    }

    void surrogates(String text, String path) {
      if (!escapes || text == null) {
        return;
      }
      for (int i = 0; i < text.length(); i++) {
        char c = text.charAt(i);
        if (Character.isHighSurrogate(c)
            && i + 1 < text.length()
            && Character.isLowSurrogate(text.charAt(i + 1))) {
          i++;
        } else if (Character.isSurrogate(c)) {
          note(
              MALFORMED
                  + "\ta \\u escape in "
                  + (path.isEmpty() ? "a field name" : path)
                  + " is half of a UTF-16 surrogate pair: it is no character and cannot be"
                  + " stored as UTF-8");
          return;
        }
      }
    }

    void note(String found) {
      if (problem == null) {
        problem = found;
      }
    }
  }
}
