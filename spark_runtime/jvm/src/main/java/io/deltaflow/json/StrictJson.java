package io.deltaflow.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteOrder;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The strict half of JSON routing: is a record's value exactly one JSON object (RFC 8259), and
 * does it give no value Spark's from_json would silently reinterpret?
 *
 * <p>Spark's from_json stops after the first object (a second one after it is dropped), accepts
 * single quotes and NaN, takes the last of duplicate keys and reads a number given for a
 * TIMESTAMP as epoch seconds (epoch milliseconds land in year 55,800). The runtime applies one
 * instance (built with the table's schema) as a Spark UDF to the raw bytes of every JSON record
 * that passed the cheap checks, and routes on its answer; from_json then only converts what this
 * accepted. A UDF over the bytes, rather than {@code java_method} over the value as text, spares
 * each record a reflective call and a UTF-8 decoding into a Java String.
 *
 * <p>It first refuses a value that is not valid UTF-8 ({@code invalid_utf8}, by Spark's own
 * definition, {@code UTF8String.isValid}): an all-ASCII value, the common case, is recognized
 * eight bytes at a time, cheaper than Spark's byte-by-byte {@code is_valid_utf8} the routing ran
 * before this; the same pass looks for a backslash (only a value with a {@code \\u} escape can
 * hold a lone surrogate, which the walk then looks for).
 *
 * <p>Jackson's defaults are RFC 8259: no comments, single quotes, unquoted names, NaN/Infinity,
 * leading zeros, trailing commas or raw control characters; whitespace is space, tab, LF, CR.
 * Duplicate keys are refused at every depth (the walk's own detection: Jackson's builds a hash
 * set for every object, a fifth of this check's time on a record of a few fields). The walk
 * follows the table's schema (Spark's StructType JSON) only to find numbers at TIMESTAMP and DATE
 * positions and to see whether any top-level field of the schema is present; every other type
 * question is from_json's.
 */
public final class StrictJson implements UDF1<byte[], String> {
  private static final long serialVersionUID = 1L;

  /** Reason prefixes, as the runtime's Reason enum spells them. */
  public static final String MALFORMED = "malformed_json";

  public static final String MISMATCH = "schema_mismatch";

  public static final String INVALID_UTF8 = "invalid_utf8";

  private static final VarHandle LONGS =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long HIGH_BITS = 0x8080808080808080L;
  private static final long LOW_BITS = 0x0101010101010101L;
  private static final long BACKSLASHES = 0x5C5C5C5C5C5C5C5CL;

  /** What {@link #scan} found: a byte outside ASCII, a backslash. */
  public static final int NON_ASCII = 1;

  public static final int BACKSLASH = 2;

  // What Spark's from_json reads as written (anything else it reads loosely or not at all).
  private static final Pattern PLAIN_DECIMAL =
      Pattern.compile("[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?");
  private static final Pattern PARTIAL_DATE = Pattern.compile("[+-]?[0-9]{4,}(-[0-9]{1,2})?");
  private static final Pattern FULL_DATE = Pattern.compile("[+-]?[0-9]{4,}-[0-9]{1,2}-[0-9]{1,2}");
  private static final Pattern FRACTION = Pattern.compile("[0-9]:[0-9]{2}[.,]([0-9]+)");

  private static final JsonFactory FACTORY = new JsonFactory();
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private final String schemaJson;
  // Built from schemaJson where the UDF runs (executors receive the text, not the tree).
  private transient Node root;

  /**
   * The check for values of one table schema ({@code schemaJson}: Spark's StructType JSON).
   *
   * @throws IllegalArgumentException if the schema is not Spark's JSON of a type
   */
  public StrictJson(String schemaJson) {
    this.schemaJson = schemaJson;
    this.root = parseSchema(schemaJson);
  }

  /**
   * Null when {@code value} (UTF-8) is one strict JSON object that fits, or is null (tombstones
   * are the cheap checks' concern); otherwise {@code "<reason>\t<detail>"}, the reason being
   * invalid_utf8, malformed_json or schema_mismatch.
   */
  @Override
  public String call(byte[] value) {
    if (value == null) {
      return null;
    }
    Node schema = root;
    if (schema == null) {
      schema = parseSchema(schemaJson);
      root = schema;
    }
    return check(value, schema);
  }

  private static String check(byte[] value, Node root) {
    int found = scan(value);
    if ((found & NON_ASCII) != 0 && !UTF8String.fromBytes(value).isValid()) {
      return INVALID_UTF8 + "\tvalue is not valid UTF-8";
    }
    String encoding = notUtf8Text(value);
    if (encoding != null) {
      return MALFORMED + "\t" + encoding;
    }
    try (JsonParser parser = FACTORY.createParser(value)) {
      JsonToken first = parser.nextToken();
      if (first == null) {
        return MALFORMED + "\tvalue is empty or whitespace only";
      }
      if (first != JsonToken.START_OBJECT) {
        return MALFORMED + "\tvalue is a JSON " + kind(first) + ", not an object";
      }
      Walk walk = new Walk((found & BACKSLASH) != 0 && hasUnicodeEscape(value));
      int known = walk.object(parser, root, null);
      JsonToken after = parser.nextToken();
      if (after != null) {
        return MALFORMED
            + "\ttrailing data after the object at character "
            + (characters(value, parser.currentTokenLocation().getByteOffset()) + 1)
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
      return null;
    } catch (JsonProcessingException error) {
      return MALFORMED + "\t" + describe(error, value);
    } catch (IOException error) {
      return MALFORMED + "\t" + error.getMessage();
    } catch (RuntimeException error) {
      // A value no rule foresaw must not fail the task: a failed task is retried, fails the
      // query and fails it again after every restart. Refused, it waits in the dead-letter table.
      return MALFORMED + "\tthe strict check could not read the value: " + error;
    }
  }

  /**
   * Why a value is no JSON text in UTF-8 where Jackson's byte reader would read it anyway (it
   * skips a UTF-8 byte order mark and reads NUL bytes at the start as UTF-16 or UTF-32), or
   * null. from_json reads the value as UTF-8 text, where neither is JSON.
   */
  private static String notUtf8Text(byte[] value) {
    if (value.length >= 3
        && (value[0] & 0xFF) == 0xEF
        && (value[1] & 0xFF) == 0xBB
        && (value[2] & 0xFF) == 0xBF) {
      return "value starts with a byte order mark (U+FEFF), which is not JSON whitespace";
    }
    for (int i = 0; i < Math.min(4, value.length); i++) {
      if (value[i] == 0) {
        return "byte " + (i + 1) + " is NUL: the value is not JSON text in UTF-8 (UTF-16 or"
            + " UTF-32?)";
      }
    }
    return null;
  }

  /**
   * Whether the value holds a byte outside ASCII ({@link #NON_ASCII}: only then can it be invalid
   * UTF-8) and whether it holds a backslash ({@link #BACKSLASH}), read eight bytes at a time.
   */
  public static int scan(byte[] value) {
    long high = 0;
    long backslash = 0;
    int i = 0;
    for (int end = value.length - 7; i < end; i += 8) {
      long word = (long) LONGS.get(value, i);
      high |= word;
      long x = word ^ BACKSLASHES; // a zero byte where the value has a backslash
      backslash |= (x - LOW_BITS) & ~x; // a zero byte's high bit is set (exact for "any zero")
    }
    int found = (high & HIGH_BITS) != 0 ? NON_ASCII : 0;
    if ((backslash & HIGH_BITS) != 0) {
      found |= BACKSLASH;
    }
    for (; i < value.length; i++) {
      if (value[i] < 0) {
        found |= NON_ASCII;
      } else if (value[i] == '\\') {
        found |= BACKSLASH;
      }
    }
    return found;
  }

  /** Whether the value holds a {@code \\u} escape: only such a value can hold a lone surrogate. */
  private static boolean hasUnicodeEscape(byte[] value) {
    for (int i = 0; i + 1 < value.length; i++) {
      if (value[i] == '\\') {
        if (value[i + 1] == 'u') {
          return true;
        }
        i++; // an escaped backslash cannot start another escape
      }
    }
    return false;
  }

  /** The characters (UTF-16 units, as a Java String counts them) in the first {@code bytes} of
   * a UTF-8 value: a position a reader of the record can find. */
  private static long characters(byte[] value, long bytes) {
    long count = 0;
    for (int i = 0; i < Math.min(bytes, value.length); i++) {
      int b = value[i] & 0xFF;
      if ((b & 0xC0) != 0x80) {
        count += (b & 0xF8) == 0xF0 ? 2 : 1; // a 4-byte sequence is a surrogate pair
      }
    }
    return count;
  }

  private static String describe(JsonProcessingException error, byte[] value) {
    String message = error.getOriginalMessage();
    if (message == null) {
      message = String.valueOf(error.getMessage());
    }
    int cut = message.indexOf('\n');
    message = cut >= 0 ? message.substring(0, cut) : message;
    if (error.getLocation() != null && error instanceof JsonParseException) {
      long at = characters(value, error.getLocation().getByteOffset());
      message += " (at character " + (at + 1) + ")";
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

  private static Node parseSchema(String schemaJson) {
    try {
      return Node.of(MAPPER.readTree(schemaJson));
    } catch (JsonProcessingException error) {
      throw new IllegalArgumentException("not a Spark schema: " + error.getMessage(), error);
    }
  }

  /** Where a value sits in the record ("a.b[]"): a chain of names and "[]", made text only
   * when a problem names it. */
  private record Path(Path parent, String part) {
    static final String ELEMENT = "[]";

    @Override
    public String toString() {
      if (parent == null) {
        return part;
      }
      return parent + (part.equals(ELEMENT) ? "" : ".") + part;
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
    int precision; // DECIMAL: digits in all
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
          node.precision = Integer.parseInt(name.substring(name.indexOf('(') + 1, name.indexOf(',')));
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

  /** The keys of one object so far: a short list compared in turn (most objects hold a few), a
   * hash set past {@link #LIST}. */
  private static final class Names {
    static final int LIST = 8;
    private String[] list;
    private int size;
    private Set<String> set;

    /** False if {@code name} was added before. */
    boolean add(String name) {
      if (set != null) {
        return set.add(name);
      }
      if (list == null) {
        list = new String[LIST];
      }
      for (int i = 0; i < size; i++) {
        if (list[i].equals(name)) {
          return false;
        }
      }
      if (size < LIST) {
        list[size++] = name;
        return true;
      }
      set = new HashSet<>();
      for (String known : list) {
        set.add(known);
      }
      return set.add(name);
    }
  }

  /** One record's walk; remembers the first problem that is not a parse error. */
  private static final class Walk {
    final boolean escapes; // only a value with \\u escapes can hold a lone surrogate
    String problem;

    Walk(boolean escapes) {
      this.escapes = escapes;
    }

    /**
     * Walks an object whose START_OBJECT was read; returns how many schema fields it holds.
     *
     * @throws JsonParseException at a key the object already holds
     */
    int object(JsonParser parser, Node type, Path path) throws IOException {
      int known = 0;
      Names names = new Names();
      for (JsonToken token = parser.nextToken();
          token != JsonToken.END_OBJECT;
          token = parser.nextToken()) {
        String name = parser.currentName();
        if (!names.add(name)) {
          throw new JsonParseException(parser, "Duplicate field '" + name + "'");
        }
        surrogates(name, null);
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
        value(parser, parser.nextToken(), child, new Path(path, name));
      }
      return known;
    }

    void value(JsonParser parser, JsonToken token, Node type, Path path) throws IOException {
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
          object(parser, type, path);
          break;
        case START_ARRAY:
          Node element = type.kind == Node.Kind.ARRAY ? type.element : Node.OTHER;
          for (JsonToken t = parser.nextToken(); t != JsonToken.END_ARRAY; t = parser.nextToken()) {
            value(parser, t, element, new Path(path, Path.ELEMENT));
          }
          break;
        case VALUE_STRING:
          surrogates(parser, path);
          if (type.kind == Node.Kind.DECIMAL) {
            decimalText(parser.getText(), type, path);
          } else if (type.kind == Node.Kind.TEMPORAL) {
            temporalText(parser.getText(), type, path);
          }
          break;
        default:
          break;
      }
    }

    /** Numbers Spark would change silently: rounded to a DECIMAL's scale, beyond its precision,
     * or overflowing to Infinity or underflowing to 0 in a DOUBLE or FLOAT. */
    void number(JsonParser parser, Node type, Path path) throws IOException {
      if (type.kind == Node.Kind.DECIMAL) {
        BigDecimal value;
        try {
          value = parser.getDecimalValue();
        } catch (NumberFormatException | ArithmeticException error) {
          // An exponent past an int's range: no BigDecimal, let alone a DECIMAL, holds it.
          note(mismatch(path, type, parser.getText(), "beyond any " + type.label));
          return;
        }
        decimal(value, parser.getText(), type, path);
      } else if ((type.kind == Node.Kind.DOUBLE || type.kind == Node.Kind.FLOAT)
          && mayOverflow(parser)) {
        double value = parser.getDoubleValue();
        boolean single = type.kind == Node.Kind.FLOAT;
        if (single ? Float.isInfinite((float) value) : Double.isInfinite(value)) {
          note(
              mismatch(
                  path,
                  type,
                  parser.getText(),
                  "beyond the column's range, it would be stored as Infinity"));
        } else if ((single ? (float) value == 0 : value == 0) && nonZeroDigits(parser)) {
          note(
              mismatch(
                  path,
                  type,
                  parser.getText(),
                  "closer to zero than the column can tell apart, it would be stored as 0"));
        }
      }
    }

    /** A DECIMAL that Spark would round to the column's scale or find beyond its precision,
     * judged without building digits an exponent only implies (1E-2147483647 has one digit). */
    void decimal(BigDecimal value, String text, Node type, Path path) {
      if (value.signum() == 0) {
        return;
      }
      long integerDigits = (long) value.precision() - value.scale();
      int kept = type.precision - type.scale;
      if (integerDigits > kept) {
        note(
            mismatch(
                path,
                type,
                text,
                "more digits before the point than the column keeps (" + kept + ")"));
        return;
      }
      long dropped = (long) value.scale() - type.scale;
      if (dropped > 0
          && (dropped >= value.precision()
              || value.unscaledValue().mod(BigInteger.TEN.pow((int) dropped)).signum() != 0)) {
        note(
            mismatch(
                path,
                type,
                text,
                "more digits after the point than the column keeps, and rounding would change"
                    + " the value"));
      }
    }

    /** A DECIMAL given as a string: Spark reads it with a locale's number format (grouping
     * separators, then rounding), so only a plain decimal number is taken, and judged as one. */
    void decimalText(String text, Node type, Path path) {
      if (!PLAIN_DECIMAL.matcher(text).matches()) {
        note(
            mismatch(
                path,
                type,
                quoted(text),
                "not a plain decimal number (digits, one '.', an optional exponent): Spark would"
                    + " read grouping separators and other forms loosely"));
        return;
      }
      BigDecimal value;
      try {
        value = new BigDecimal(text);
      } catch (NumberFormatException error) {
        note(mismatch(path, type, quoted(text), "beyond any " + type.label));
        return;
      }
      decimal(value, quoted(text), type, path);
    }

    /** A DATE or TIMESTAMP string Spark would complete or cut: a year or year-month alone
     * (Spark makes it the 1st of January or of the month), a DATE with a time (dropped), a
     * TIMESTAMP with more than microsecond digits (truncated). Spark itself refuses impossible
     * dates, times and offsets (2026-02-30, 24:00, +25:00). */
    void temporalText(String text, Node type, Path path) {
      String trimmed = text.strip();
      if (PARTIAL_DATE.matcher(trimmed).matches()) {
        note(
            mismatch(
                path,
                type,
                quoted(text),
                "a date without "
                    + (trimmed.indexOf('-', 1) > 0 ? "a day" : "a month and day")
                    + ": Spark would store the first of the period; give a full date such as"
                    + " \"2026-01-31\""));
        return;
      }
      Matcher date = FULL_DATE.matcher(trimmed);
      if (!date.lookingAt()) {
        return; // Spark's own parse decides (and refuses what it cannot read)
      }
      String rest = trimmed.substring(date.end());
      if (type.label.equals("DATE")) {
        if (!rest.isEmpty()) {
          note(
              mismatch(
                  path,
                  type,
                  quoted(text),
                  "a date with a time or zone after it, which Spark would drop: give the date"
                      + " alone, or use a TIMESTAMP column"));
        }
        return;
      }
      Matcher fraction = FRACTION.matcher(rest);
      if (fraction.find() && fraction.group(1).length() > 6) {
        String beyond = fraction.group(1).substring(6);
        if (!beyond.chars().allMatch(c -> c == '0')) {
          note(
              mismatch(
                  path,
                  type,
                  quoted(text),
                  "more digits of a second than microseconds, which Spark would cut off"));
        }
      }
    }

    /** Whether a number's text can be beyond a FLOAT's range (about 3.4e38), without parsing
     * it: only one with an exponent or more than 38 characters can. */
    static boolean mayOverflow(JsonParser parser) throws IOException {
      int length = parser.getTextLength();
      if (length > 38) {
        return true;
      }
      char[] text = parser.getTextCharacters();
      int end = parser.getTextOffset() + length;
      for (int i = parser.getTextOffset(); i < end; i++) {
        if (text[i] == 'e' || text[i] == 'E') {
          return true;
        }
      }
      return false;
    }

    /** Whether a number's digits before its exponent hold anything but zeros. */
    static boolean nonZeroDigits(JsonParser parser) throws IOException {
      char[] text = parser.getTextCharacters();
      int end = parser.getTextOffset() + parser.getTextLength();
      for (int i = parser.getTextOffset(); i < end; i++) {
        char c = text[i];
        if (c == 'e' || c == 'E') {
          return false;
        }
        if (c >= '1' && c <= '9') {
          return true;
        }
      }
      return false;
    }

    static String mismatch(Path path, Node type, String given, String why) {
      return MISMATCH + "\t" + path + " (" + type.label + ") is " + shorten(given) + ": " + why;
    }

    static String quoted(String text) {
      return "\"" + text + "\"";
    }

    static String shorten(String text) {
      return text.length() <= 80 ? text : text.substring(0, 77) + "...";
    }

    void surrogates(JsonParser parser, Path path) throws IOException {
      if (escapes) {
        surrogates(parser.getText(), path);
      }
    }

    void surrogates(String text, Path path) {
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
                  + (path == null ? "a field name" : path)
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
