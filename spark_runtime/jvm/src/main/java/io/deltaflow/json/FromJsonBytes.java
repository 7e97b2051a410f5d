package io.deltaflow.json;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.util.FailureSafeParser;
import org.apache.spark.sql.catalyst.util.PermissiveMode$;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's {@code from_json} in PERMISSIVE mode, reading the value's UTF-8 bytes with Jackson's
 * byte parser instead of a character reader over them.
 *
 * <p>It builds what {@code JsonToStructs} builds (the same {@code JSONOptions} from the same
 * options and time zone, {@code JacksonParser} over the schema without its corrupt-record
 * column, {@code FailureSafeParser}) and answers what it answers (the first row, or null). The
 * one difference is the parser Jackson is given: {@code from_json} decodes the bytes through an
 * {@code InputStreamReader}, Jackson's slower character path; this reads them directly (about
 * 1.3 us a ~300-byte record less on the reference machine, bench/README).
 *
 * <p>Only for values that are valid UTF-8 JSON text, with no byte order mark and no NUL among
 * their first four bytes: on those, both read the same characters. On anything else the two
 * differ (the reader replaces invalid bytes with U+FFFD; the byte parser skips a BOM and reads
 * leading NULs as UTF-16 or UTF-32), so the runtime applies this only to values its cheap checks
 * and {@link StrictJson} accepted, which refuse all three.
 *
 * <p>Applied through Catalyst's {@code Invoke} on an object literal: one instance per plan,
 * serialized with it; each task builds its own parser on first use (not thread-safe, as
 * {@code from_json}'s is not).
 */
public final class FromJsonBytes implements Serializable {
  private static final long serialVersionUID = 1L;

  private final String schemaJson;
  private final TreeMap<String, String> options; // a Serializable type (javac's serial lint)
  private final String timeZone;
  private final String corruptColumn;
  private transient FailureSafeParser<byte[]> parser;

  /**
   * {@code from_json(value, schema, options)} as a session in {@code timeZone} would run it.
   *
   * @param schemaJson the struct to parse into (Spark's StructType JSON), all fields nullable,
   *     including the corrupt-record column if {@code options} names one
   * @param options from_json's options ({@code mode} must be PERMISSIVE or absent)
   * @param timeZone the session time zone (spark.sql.session.timeZone)
   */
  public FromJsonBytes(String schemaJson, Map<String, String> options, String timeZone) {
    this.schemaJson = schemaJson;
    this.options = new TreeMap<>(options);
    this.timeZone = timeZone;
    String mode = this.options.getOrDefault("mode", "PERMISSIVE");
    if (!mode.equalsIgnoreCase("PERMISSIVE")) {
      throw new IllegalArgumentException("only PERMISSIVE mode, as the runtime routes: " + mode);
    }
    this.corruptColumn = this.options.getOrDefault("columnNameOfCorruptRecord", "_corrupt_record");
    build(); // a schema or option Spark refuses fails here, on the driver, not in a task
  }

  /** The parsed row of a UTF-8 JSON value (see the class comment for which values), or null. */
  public InternalRow parse(byte[] value) {
    if (value == null) {
      return null;
    }
    FailureSafeParser<byte[]> current = parser;
    if (current == null) {
      current = build();
      parser = current;
    }
    Iterator<InternalRow> rows = current.parse(value);
    return rows.hasNext() ? rows.next() : null;
  }

  private FailureSafeParser<byte[]> build() {
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    JSONOptions parsed =
        new JSONOptions(
            scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(options)),
            timeZone,
            corruptColumn);
    StructType actual =
        new StructType(
            Arrays.stream(schema.fields())
                .filter(field -> !field.name().equals(corruptColumn))
                .toArray(StructField[]::new));
    Seq<Filter> noFilters = CollectionConverters.asScala(java.util.List.<Filter>of()).toSeq();
    JacksonParser jackson = new JacksonParser(actual, parsed, false, noFilters);
    // Over a stream of the bytes, not the array itself: JacksonParser reads a non-string value
    // given for a STRING field as the exact source text when the parser's content is a byte
    // array, and re-serializes it (compact) otherwise, as from_json's reader makes it do.
    scala.Function2<JsonFactory, byte[], JsonParser> bytesParser =
        (factory, bytes) -> {
          try {
            return factory.createParser(new ByteArrayInputStream(bytes));
          } catch (IOException error) {
            throw new UncheckedIOException(error);
          }
        };
    scala.Function1<byte[], UTF8String> recordText = UTF8String::fromBytes;
    scala.Function1<byte[], scala.collection.Iterable<InternalRow>> parseRecord =
        bytes -> jackson.parse(bytes, bytesParser, recordText);
    return new FailureSafeParser<>(parseRecord, PermissiveMode$.MODULE$, schema, corruptColumn);
  }

  /** How the plan shows it (the runtime's tests count it there). */
  @Override
  public String toString() {
    return "deltaflow_from_json_bytes";
  }
}
