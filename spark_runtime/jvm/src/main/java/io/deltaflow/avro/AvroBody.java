package io.deltaflow.avro;

import java.io.IOException;
import java.util.Base64;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;

/**
 * Does an Avro body hold exactly one record of the schema? Spark's from_avro decodes a record
 * from the start of the bytes and ignores what follows, so a value with bytes left over (two
 * records, a framing the spec does not name, garbage) would land as if it were the first record.
 *
 * <p>Called by the runtime through Spark's {@code java_method} (which passes strings only, hence
 * base64) on values from_avro decoded; skips the record without building it.
 */
public final class AvroBody {
  /** The answer for a body that is exactly one record. */
  public static final String OK = "";

  private static final DecoderFactory DECODERS = DecoderFactory.get();
  // The schema literal is the same text on every row: keep the last one parsed.
  private static volatile Parsed last;

  private record Parsed(String json, Schema schema) {}

  private AvroBody() {}

  /** {@link #OK}, or the detail for the dead letter: why the body is not exactly one record. */
  public static String check(String base64Body, String schemaJson) {
    if (base64Body == null) {
      return OK; // tombstones are the cheap checks' concern
    }
    byte[] body = Base64.getDecoder().decode(base64Body);
    BinaryDecoder decoder = DECODERS.binaryDecoder(body, null);
    try {
      GenericDatumReader.skip(schema(schemaJson), decoder);
      if (decoder.isEnd()) {
        return OK;
      }
      int left = decoder.inputStream().available();
      return left
          + " of "
          + body.length
          + " bytes left after the record: not one record of spec.format.schema (two records,"
          + " or a framing such as Confluent's: see spec.format.avroWireFormat)";
    } catch (IOException | RuntimeException error) {
      return "does not decode with spec.format.schema: " + error;
    }
  }

  private static Schema schema(String schemaJson) {
    Parsed known = last;
    if (known != null && known.json().equals(schemaJson)) {
      return known.schema();
    }
    Schema schema = new Schema.Parser().parse(schemaJson);
    last = new Parsed(schemaJson, schema);
    return schema;
  }
}
