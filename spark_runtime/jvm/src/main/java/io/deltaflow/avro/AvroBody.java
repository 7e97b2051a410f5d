package io.deltaflow.avro;

import java.util.List;
import org.apache.avro.Schema;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Is an Avro body exactly one record of the schema, every length and count in it bounded by the
 * bytes that follow it? The runtime applies one instance (built with the spec's schema) as a
 * Spark UDF to each Avro body before from_avro decodes it, and routes on its answer.
 *
 * <p>Two things from_avro does not do. It decodes a record from the start of the bytes and
 * ignores what follows, so a value with bytes left over (two records, a framing the spec does not
 * name, garbage) would land as if it were the first record. And Avro's decoder allocates what a
 * length or count prefix declares before it reads: a 5-byte value declaring a 2^30-byte string or
 * a 2^30-element array takes gigabytes, the executor dies of OutOfMemoryError, and the batch is
 * retried forever. This walk reads the prefixes itself, allocates nothing, and refuses a length
 * beyond the bytes that remain, a count beyond them (an element takes at least one byte, except of
 * a type that takes none, such as null: more of those than there are bytes left is refused too),
 * a union or enum index out of range, and nesting deeper than {@link #MAX_DEPTH} (a recursive
 * schema would otherwise overflow the decoder's stack).
 */
public final class AvroBody implements UDF1<byte[], String> {
  private static final long serialVersionUID = 1L;

  /** Nesting (records, arrays, maps, unions) deeper than this is refused, as Jackson's default. */
  public static final int MAX_DEPTH = 1000;

  private final String schemaJson;
  // Parsed where the UDF runs (executors receive the text, not the schema).
  private transient Schema schema;

  /**
   * The check for bodies of one Avro schema.
   *
   * @throws org.apache.avro.SchemaParseException if {@code schemaJson} is no Avro schema
   */
  public AvroBody(String schemaJson) {
    this.schemaJson = schemaJson;
    this.schema = new Schema.Parser().parse(schemaJson);
  }

  /** Null when {@code body} is exactly one record of the schema (or null: tombstones are the
   * cheap checks' concern), else the detail for the dead letter. */
  @Override
  public String call(byte[] body) {
    if (body == null) {
      return null;
    }
    Schema known = schema;
    if (known == null) {
      known = new Schema.Parser().parse(schemaJson);
      schema = known;
    }
    return check(body, known);
  }

  /** {@link #call}'s answer for {@code body} under {@code schema}. */
  public static String check(byte[] body, Schema schema) {
    Walk walk = new Walk(body);
    try {
      walk.skip(schema, 0);
    } catch (Malformed error) {
      return "does not decode with spec.format.schema: " + error.getMessage();
    } catch (RuntimeException error) {
      // A body no rule foresaw must not fail the task (a failed task fails the query, and again
      // after every restart): refused, it waits in the dead-letter table.
      return "does not decode with spec.format.schema: " + error;
    }
    if (walk.pos == body.length) {
      return null;
    }
    return (body.length - walk.pos)
        + " of "
        + body.length
        + " bytes left after the record: not one record of spec.format.schema (two records,"
        + " or a framing such as Confluent's: see spec.format.avroWireFormat)";
  }

  /** Why a body is not a record of the schema. */
  private static final class Malformed extends Exception {
    private static final long serialVersionUID = 1L;

    Malformed(String message) {
      super(message, null, false, false); // no stack trace: a refusal, not a fault
    }
  }

  /** A cursor over one body, reading Avro's binary encoding without building values. */
  private static final class Walk {
    final byte[] body;
    int pos;

    Walk(byte[] body) {
      this.body = body;
    }

    int remaining() {
      return body.length - pos;
    }

    void skip(Schema schema, int depth) throws Malformed {
      if (depth > MAX_DEPTH) {
        throw new Malformed("nested deeper than " + MAX_DEPTH + " levels");
      }
      switch (schema.getType()) {
        case NULL:
          break;
        case BOOLEAN:
          bytes(1, "a boolean");
          break;
        case INT:
          varint(5, "an int");
          break;
        case LONG:
          varint(10, "a long");
          break;
        case FLOAT:
          bytes(4, "a float");
          break;
        case DOUBLE:
          bytes(8, "a double");
          break;
        case STRING:
        case BYTES:
          bytes(length(schema.getType() == Schema.Type.STRING ? "a string" : "bytes"), "bytes");
          break;
        case FIXED:
          bytes(schema.getFixedSize(), "a fixed of " + schema.getFixedSize() + " bytes");
          break;
        case ENUM:
          index(schema.getEnumSymbols().size(), "enum " + schema.getFullName());
          break;
        case UNION:
          List<Schema> branches = schema.getTypes();
          skip(branches.get(index(branches.size(), "union")), depth + 1);
          break;
        case RECORD:
          for (Schema.Field field : schema.getFields()) {
            skip(field.schema(), depth + 1);
          }
          break;
        case ARRAY:
          blocks(schema.getElementType(), null, depth + 1);
          break;
        case MAP:
          blocks(schema.getValueType(), Schema.create(Schema.Type.STRING), depth + 1);
          break;
        default:
          throw new Malformed("unsupported Avro type " + schema.getType());
      }
    }

    /** An array's or map's blocks: a count (negative: followed by the block's byte size), the
     * items, until a count of 0. */
    void blocks(Schema item, Schema key, int depth) throws Malformed {
      String what = key == null ? "an array block" : "a map block";
      for (long count = varint(10, what + " count");
          count != 0;
          count = varint(10, what + " count")) {
        if (count < 0) {
          count = -count;
          long size = varint(10, what + " size");
          if (size < 0 || size > remaining()) {
            throw new Malformed(what + " declares " + size + " bytes, " + remaining() + " remain");
          }
        }
        if (count > remaining()) {
          throw new Malformed(
              what
                  + " declares "
                  + count
                  + " items, more than the "
                  + remaining()
                  + " bytes that remain");
        }
        for (long i = 0; i < count; i++) {
          if (key != null) {
            skip(key, depth);
          }
          skip(item, depth);
        }
      }
    }

    /** A union branch or enum symbol index, checked against the count. */
    int index(int count, String what) throws Malformed {
      long index = varint(5, what + " index");
      if (index < 0 || index >= count) {
        throw new Malformed(what + " index " + index + " is not one of its " + count);
      }
      return (int) index;
    }

    /** A string's or bytes' length prefix, checked against the bytes that remain. */
    int length(String what) throws Malformed {
      long length = varint(10, what + "'s length");
      if (length < 0) {
        throw new Malformed(what + " has a negative length (" + length + ")");
      }
      if (length > remaining()) {
        throw new Malformed(
            what + " declares " + length + " bytes, only " + remaining() + " remain");
      }
      return (int) length;
    }

    void bytes(long count, String what) throws Malformed {
      if (count > remaining()) {
        throw new Malformed("the value ends inside " + what);
      }
      pos += (int) count;
    }

    /** A zig-zag varint of at most {@code maxBytes} bytes (5 for an int, 10 for a long). */
    long varint(int maxBytes, String what) throws Malformed {
      long raw = 0;
      for (int shift = 0, n = 0; ; shift += 7, n++) {
        if (n == maxBytes) {
          throw new Malformed(what + " is longer than " + maxBytes + " bytes");
        }
        if (pos >= body.length) {
          throw new Malformed("the value ends inside " + what);
        }
        int b = body[pos++] & 0xFF;
        raw |= (long) (b & 0x7F) << shift;
        if ((b & 0x80) == 0) {
          break;
        }
      }
      return (raw >>> 1) ^ -(raw & 1);
    }
  }
}
