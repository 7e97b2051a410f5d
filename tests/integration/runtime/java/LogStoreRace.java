// One writer of the log-store race (test_s3a_object_store.py): its own JVM, compiled once by
// the test. Reads the Hadoop settings from the environment (RACE_CONF:
// key=value lines), gets its connection to the store ready, says "ready", waits for the start
// file, then commits version 0 of the table through S3ConditionalLogStore and says "created" or
// "exists".
import io.deltaflow.storage.S3ConditionalLogStore;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class LogStoreRace {
  public static void main(String[] args) throws Exception {
    Path commit = new Path(args[0]);
    String writer = args[1];
    java.nio.file.Path go = Paths.get(args[2]);
    Configuration conf = new Configuration();
    for (String line : System.getenv("RACE_CONF").split("\n")) {
      int eq = line.indexOf('=');
      conf.set(line.substring(0, eq), line.substring(eq + 1));
    }
    S3ConditionalLogStore store = new S3ConditionalLogStore(conf);
    commit.getFileSystem(conf).exists(commit.getParent()); // connect before the race
    System.out.println("ready");
    System.out.flush();
    while (!Files.exists(go)) {
      Thread.sleep(1);
    }
    String action = "{\"commitInfo\":{\"writer\":" + writer + "}}";
    try {
      store.write(commit, List.of(action).iterator(), false, conf);
      System.out.println("created");
    } catch (FileAlreadyExistsException lost) {
      System.out.println("exists");
    }
  }
}
