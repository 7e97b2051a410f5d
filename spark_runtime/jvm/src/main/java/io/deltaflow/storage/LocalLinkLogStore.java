package io.deltaflow.storage;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A Delta LogStore for file:// tables (a local disk, a PersistentVolume, NFS) that is safe with
 * several writers in several processes (the stream and the OPTIMIZE/VACUUM jobs).
 *
 * <p>Delta's optimistic concurrency needs "create N.json only if it does not exist" to be atomic.
 * Delta's own stores for local file systems check for the file and then rename a temporary file
 * onto it, under a lock of one JVM: two processes both pass the check, and the second rename
 * replaces the first writer's commit. This store writes the commit to a temporary file (flushed to
 * disk) and publishes it with {@code link(2)}, which creates the name only if it does not exist,
 * atomically, on local file systems and on NFS alike; the losing writer gets {@link
 * FileAlreadyExistsException}, which Delta turns into a conflict check and a retry at the next
 * version. A file system without hard links fails the commit, saying so, rather than risk it.
 */
public class LocalLinkLogStore extends HadoopFileSystemLogStore {
  public LocalLinkLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration conf)
      throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    java.nio.file.Path target = Paths.get(fs.makeQualified(path).toUri());
    Files.createDirectories(target.getParent());
    java.nio.file.Path temp =
        target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      writeDurably(temp, S3ConditionalLogStore.join(actions));
      if (overwrite) {
        // Only for files Delta allows to be replaced (e.g. _last_checkpoint).
        Files.move(
            temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        return;
      }
      try {
        Files.createLink(target, temp);
      } catch (FileAlreadyExistsException conflict) {
        throw new FileAlreadyExistsException(path.toString());
      } catch (UnsupportedOperationException | IOException noLinks) {
        throw new IOException(
            "cannot commit "
                + path
                + " atomically: the file system does not create hard links ("
                + noLinks
                + "); Deltaflow's file:// tables need a file system that does (local disks, NFS)",
            noLinks);
      }
    } finally {
      Files.deleteIfExists(temp);
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration conf) {
    return false; // the name appears once the whole file is on disk
  }

  private static void writeDurably(java.nio.file.Path file, byte[] content) throws IOException {
    try (FileChannel channel =
        FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
      ByteBuffer buffer = ByteBuffer.wrap(content);
      while (buffer.hasRemaining()) {
        channel.write(buffer);
      }
      channel.force(true);
    }
  }
}
