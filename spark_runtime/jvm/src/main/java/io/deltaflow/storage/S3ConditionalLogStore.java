package io.deltaflow.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A Delta LogStore for s3a:// tables that is safe with several writers in several processes (the
 * stream and the OPTIMIZE/VACUUM jobs).
 *
 * <p>Delta's optimistic concurrency needs "create N.json only if it does not exist" to be atomic.
 * Delta's own S3 store checks-then-writes under a JVM lock, which two processes both pass. This
 * store sends the commit as one conditional PUT ({@code If-None-Match: *}) through S3A's
 * create-file builder (Hadoop 3.4.2+): the server either creates the object or answers 412, and
 * the losing writer gets {@link FileAlreadyExistsException}, which Delta turns into a conflict
 * check and a retry at the next version. Reads and listings are the Hadoop FileSystem ones (S3 is
 * strongly consistent).
 *
 * <p>A 412 on our own retried PUT (the first attempt landed but its answer was lost) is told apart
 * by reading the object back: the same bytes mean the commit is ours.
 */
public class S3ConditionalLogStore extends HadoopFileSystemLogStore {
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

  public S3ConditionalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration conf)
      throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    byte[] content = join(actions);
    if (overwrite) {
      // Only for files Delta allows to be replaced (e.g. _last_checkpoint).
      try (FSDataOutputStream out = fs.create(path, true)) {
        out.write(content);
      }
      return;
    }
    FSDataOutputStream out = createConditional(fs, path);
    try {
      out.write(content);
    } catch (IOException e) {
      out.abort(); // never publish part of a commit
      throw e;
    }
    try {
      out.close(); // the conditional PUT happens here
    } catch (IOException e) {
      if (!fs.exists(path)) {
        throw e; // nothing was created: a real failure, not a conflict
      }
      if (Arrays.equals(readAll(fs, path), content)) {
        return; // our own earlier attempt created it
      }
      FileAlreadyExistsException conflict = new FileAlreadyExistsException(path.toString());
      conflict.initCause(e);
      throw conflict;
    }
  }

  /**
   * Does the store behind {@code dir} honour {@code If-None-Match: *}? This store's safety rests
   * on it, and a store that ignores the header (some S3-compatible servers, older versions)
   * would let a second writer silently replace a commit. Creates a probe object under {@code
   * dir}, creates it again conditionally, reads it back and deletes it.
   *
   * <p>Each probe has a folder of its own: the stream and its OPTIMIZE and VACUUM jobs start
   * together and probe the same table, and a shared folder deleted by one process took the
   * others' probes with it (a job then failed on NoSuchKey reading its own probe back).
   *
   * @return null when the second create was refused, else why the store cannot be trusted
   */
  public static String probeConditionalCreate(FileSystem fs, Path dir) throws IOException {
    Path probe = new Path(dir, "_deltaflow_probe-" + UUID.randomUUID() + "/probe");
    byte[] first = "first".getBytes(StandardCharsets.UTF_8);
    try {
      try (FSDataOutputStream out = createConditional(fs, probe)) {
        out.write(first);
      }
      try (FSDataOutputStream out = createConditional(fs, probe)) {
        out.write("second".getBytes(StandardCharsets.UTF_8));
      } catch (IOException refused) {
        // expected: 412, or the builder's own refusal of an existing path
      }
      if (Arrays.equals(readAll(fs, probe), first)) {
        return null;
      }
      return "a second conditional PUT (If-None-Match: *) of "
          + probe
          + " replaced the object: the store ignores the condition, so two writers of one"
          + " table (the stream and its OPTIMIZE job) could overwrite each other's commits";
    } finally {
      fs.delete(probe.getParent(), true);
    }
  }

  private static FSDataOutputStream createConditional(FileSystem fs, Path path)
      throws IOException {
    FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
    builder.overwrite(false);
    builder.recursive();
    builder.must(CONDITIONAL_CREATE, true);
    return builder.build();
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration conf) {
    return false; // one PUT: an object is visible whole or not at all
  }

  /** A commit's actions as its file holds them: one JSON line each, UTF-8 (both stores). */
  static byte[] join(Iterator<String> actions) {
    ByteArrayOutputStream buffer = new ByteArrayOutputStream();
    while (actions.hasNext()) {
      buffer.writeBytes((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
    return buffer.toByteArray();
  }

  private static byte[] readAll(FileSystem fs, Path path) throws IOException {
    try (InputStream in = fs.open(path)) {
      return in.readAllBytes();
    }
  }
}
