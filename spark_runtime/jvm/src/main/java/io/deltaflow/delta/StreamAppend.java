package io.deltaflow.delta;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.delta.AdaptiveMetadataTableFeature$;
import org.apache.spark.sql.delta.CommittedTransaction;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.DeltaOptions;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.OptimisticTransaction$;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.VersionChecksum;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.Metadata;
import org.apache.spark.sql.delta.actions.SetTransaction;
import org.apache.spark.sql.delta.commands.DMLUtils;
import org.apache.spark.sql.delta.commands.WriteIntoDelta;
import org.apache.spark.sql.delta.hooks.CheckpointHook$;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One idempotent append of a stream's micro-batch to a Delta table: what
 * {@code df.write.format("delta").option("txnAppId", ...).option("txnVersion", ...).save(path)}
 * does, except how it reads the stream's last committed batch.
 *
 * <p>Delta (4.4) answers {@code txnVersion} from the snapshot's full state, a log replay of three
 * Spark jobs on every commit whose cost grows with the table: a third of a small batch's CPU.
 * The table's checksum (the {@code .crc} of the snapshot's version) already holds the same
 * answer: an incremental commit writes {@code setTransactions} into it only when it has all of
 * them, exactly as the replay would give them (it leaves them out when the table expires
 * transactions or holds too many). So the checksum answers when it has them (or, when a crash
 * left the newest version without one, an earlier checksum and the commits after it), and the
 * full state only when none does.
 *
 * <p>The rest is Delta's own: {@link WriteIntoDelta} writes the files and the {@code txn} action
 * (from the {@code txnAppId}/{@code txnVersion} options), and the transaction records that it
 * read the stream's id, so a concurrent commit of the same stream fails this one (Delta's
 * conflict check), as it does after {@code txnVersion}. Two steps, so a test can interleave two
 * writers between them.
 *
 * <p>The log checkpoint Delta writes every {@code delta.checkpointInterval} commits (10 by
 * default) is written after the commit returns, on a thread of its own: it is a replay of the
 * table's state plus a Parquet write, seconds on a small driver, and inside the batch it made one
 * batch in ten that much later (a freshness target's p99 pays for it). A checkpoint only speeds
 * up reading the log: one not written (the process died first) is covered by the next. Deferring
 * the hook is not enough: a commit Delta finds a checkpoint due at also reads the new snapshot's
 * file count and size for its commit statistics (TransactionHelper, "force an expensive snapshot
 * state reconstruction"), so the transaction is told no checkpoint is due ({@link
 * DeferredCheckpointTransaction}) and this class decides it, by Delta's own rule. In a pool of
 * twenty members on one task thread, those replays, all at once, had made such batches take
 * 67-478 s (FL2, bench/README.md).
 */
public final class StreamAppend {
  /**
   * Versions looked back for a checksum when the newest has none (see fromEarlierChecksum). A
   * crash leaves only its last commit without one (the next commit writes its checksum again),
   * and a table that writes none pays this many missing reads per append: a few.
   */
  static final int CHECKSUM_LOOKBACK = 4;

  private static final Logger LOG = LoggerFactory.getLogger(StreamAppend.class);

  /** One thread for every table's deferred checkpoints: they queue, never run side by side. */
  private static final ExecutorService CHECKPOINTS =
      Executors.newSingleThreadExecutor(
          work -> {
            Thread thread = new Thread(work, "deltaflow-delta-checkpoint");
            thread.setDaemon(true);
            return thread;
          });

  /** The FAIR scheduler pool the deferred checkpoints' jobs run in (ignored under FIFO). */
  static final String CHECKPOINT_SCHEDULER_POOL = "deltaflow-log-checkpoints";

  /** Deferred checkpoints not finished yet (queued or running). */
  private static final AtomicInteger CHECKPOINTS_WAITING = new AtomicInteger();

  private final SparkSession spark;
  private final DeferredCheckpointTransaction txn;
  private final WriteIntoDelta write;
  private final DeltaOptions options;
  private final long version;
  private final long committed;
  private final boolean fromChecksum;
  private long checkpointDue = -1L;

  private StreamAppend(
      SparkSession spark,
      DeferredCheckpointTransaction txn,
      WriteIntoDelta write,
      DeltaOptions options,
      long version,
      long committed,
      boolean fromChecksum) {
    this.spark = spark;
    this.txn = txn;
    this.write = write;
    this.options = options;
    this.version = version;
    this.committed = committed;
    this.fromChecksum = fromChecksum;
  }

  /**
   * Starts the append of {@code data} to the table at {@code path} with the writer's
   * {@code options}, which must name {@code txnAppId} and {@code txnVersion}: opens the
   * transaction and reads the stream's last committed batch.
   */
  public static StreamAppend start(
      Dataset<Row> data, String path, Map<String, String> options, List<String> partitionBy) {
    SparkSession spark = (SparkSession) data.sparkSession();
    return withActive(spark, () -> open(spark, data, path, options, partitionBy));
  }

  private static StreamAppend open(
      SparkSession spark,
      Dataset<Row> data,
      String path,
      Map<String, String> options,
      List<String> partitionBy) {
    scala.collection.immutable.Map<String, String> scalaOptions = immutableMap(options);
    DeltaOptions deltaOptions = new DeltaOptions(scalaOptions, spark.sessionState().conf());
    if (deltaOptions.txnAppId().isEmpty() || deltaOptions.txnVersion().isEmpty()) {
      throw new IllegalArgumentException("StreamAppend needs the txnAppId and txnVersion options");
    }
    String appId = deltaOptions.txnAppId().get();
    long version = ((Number) deltaOptions.txnVersion().get()).longValue();
    DeltaLog log = DeltaLog.forTable(spark, new Path(path), scalaOptions);
    Seq<String> partitionColumns = CollectionConverters.asScala(partitionBy).toSeq();
    WriteIntoDelta write =
        new WriteIntoDelta(
            log,
            SaveMode.Append,
            deltaOptions,
            partitionColumns,
            immutableMap(Map.of()),
            data,
            Option.empty(),
            Option.empty(),
            false);
    // As log.startTransaction, whose only other step is a test observer's hook.
    DeferredCheckpointTransaction txn = new DeferredCheckpointTransaction(log);
    Option<Long> known = checksumTxnVersion(txn.snapshot(), appId);
    long committed;
    if (known.isDefined()) {
      committed = known.get();
      // What txnVersion records besides its answer: the read set of Delta's conflict check.
      txn.readTxn().addOne(appId);
    } else {
      committed = txn.txnVersion(appId);
    }
    return new StreamAppend(spark, txn, write, deltaOptions, version, committed, known.isDefined());
  }

  /** The stream's last batch in the table when the transaction started; -1 for none. */
  public long committedBatch() {
    return committed;
  }

  /** Whether the table's checksum answered (false: Delta replayed the log's full state). */
  public boolean fromChecksum() {
    return fromChecksum;
  }

  /**
   * Writes and commits the batch; false, writing nothing, when the table already holds it.
   * Throws Delta's {@code ConcurrentTransactionException} when another writer committed this
   * stream since {@link #start}.
   */
  public boolean commit() {
    if (committed >= version) {
      return false;
    }
    return withActive(spark, this::writeAndCommit);
  }

  private boolean writeAndCommit() {
    OptimisticTransaction$.MODULE$.setActive(txn);
    // An adaptive-metadata table checkpoints by a commit of its own: Delta's hook stays.
    boolean defer =
        !txn.snapshot().protocol().isFeatureSupported(AdaptiveMetadataTableFeature$.MODULE$);
    if (defer) {
      txn.postCommitHooks().subtractOne(CheckpointHook$.MODULE$);
      txn.deferCheckpoint = true;
    }
    try {
      DMLUtils.TaggedCommitData<Action> data =
          write.writeAndReturnCommitData(txn, spark, Option.empty(), false);
      DeltaOperations.Write operation =
          new DeltaOperations.Write(
              SaveMode.Append,
              Option.apply(write.partitionColumns()),
              Option.empty(),
              options.userMetadata(),
              Option.empty(),
              Option.empty(),
              options.canMergeSchema() ? Option.<Object>apply(Boolean.TRUE) : Option.empty(),
              Option.empty(),
              Option.empty());
      txn.commitIfNeeded(data.actions(), operation, data.stringTags());
      Option<CommittedTransaction> done = txn.getCommitted();
      if (defer && done.isDefined() && txn.checkpointDueAt(done.get().committedVersion())) {
        checkpointDue = done.get().committedVersion();
        checkpointLater(spark, done.get().deltaLog(), checkpointDue);
      }
      return true;
    } finally {
      OptimisticTransaction$.MODULE$.clearActive();
    }
  }

  /** The version this commit made a log checkpoint due at, written after it; -1 for none. */
  public long checkpointDue() {
    return checkpointDue;
  }

  /**
   * Waits up to {@code timeoutMillis} for the deferred checkpoints; whether none is left. For a
   * stop that may wait, and for tests.
   */
  public static boolean awaitCheckpoints(long timeoutMillis) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
    while (CHECKPOINTS_WAITING.get() > 0) {
      if (System.nanoTime() > deadline) {
        return false;
      }
      Thread.sleep(20);
    }
    return true;
  }

  private static void checkpointLater(SparkSession spark, DeltaLog log, long version) {
    CHECKPOINTS_WAITING.incrementAndGet();
    CHECKPOINTS.execute(
        () -> {
          try {
            // Not the batch's: a stopped query cancels its job group, and its SQL execution id
            // would nest this checkpoint's jobs under a finished batch. A FAIR scheduler pool of
            // its own (a stream pool's scheduler): the state replay shares the task threads
            // with the members' batches as one more member, never ahead of them all.
            Properties properties = new Properties();
            properties.setProperty("spark.scheduler.pool", CHECKPOINT_SCHEDULER_POOL);
            spark.sparkContext().setLocalProperties(properties);
            long started = System.nanoTime();
            withActive(
                spark,
                () -> {
                  // As Delta's CheckpointHook does, of the snapshot at the committed version.
                  Snapshot snapshot =
                      log.getSnapshotAt(version, Option.empty(), Option.empty(), false);
                  log.checkpoint(snapshot, Option.empty());
                  return null;
                });
            LOG.info(
                "checkpoint of {} at version {} written after its commit in {} ms",
                log.dataPath(),
                version,
                TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
          } catch (Throwable e) { // the next checkpoint covers this one
            LOG.warn("checkpoint of {} at version {} failed", log.dataPath(), version, e);
          } finally {
            CHECKPOINTS_WAITING.decrementAndGet();
          }
        });
  }

  /**
   * The stream's last batch (-1: none) by the snapshot's checksum; empty when the checksum does
   * not hold the table's transaction ids (then only a replay of the log can tell).
   */
  public static Option<Long> checksumTxnVersion(Snapshot snapshot, String appId) {
    if (snapshot.version() < 0) {
      return Option.apply(-1L);
    }
    Option<VersionChecksum> checksum = snapshot.checksumOpt();
    if (checksum.isDefined()) {
      return batchIn(checksum.get(), appId);
    }
    try {
      return fromEarlierChecksum(snapshot, appId);
    } catch (RuntimeException e) { // a commit file gone or unreadable: the replay will say
      return Option.empty();
    }
  }

  /** The stream's last batch (-1: none) in a checksum; empty when it holds no transaction ids. */
  private static Option<Long> batchIn(VersionChecksum checksum, String appId) {
    if (checksum.setTransactions().isEmpty()) {
      return Option.empty();
    }
    long found = -1L;
    for (SetTransaction t : CollectionConverters.asJava(checksum.setTransactions().get())) {
      if (t.appId().equals(appId)) {
        found = t.version();
      }
    }
    return Option.apply(found);
  }

  /**
   * A process killed between a commit and its checksum leaves the newest version without one:
   * the newest checksum of the versions before (at most {@link #CHECKSUM_LOOKBACK} back) and the
   * {@code txn} actions of the commits after it answer, read from the log's JSON without a Spark
   * job. Empty when there is no such checksum, it holds no transaction ids, or a commit after it
   * changes the table's metadata (which may change how long transaction ids are kept).
   */
  private static Option<Long> fromEarlierChecksum(Snapshot snapshot, String appId) {
    DeltaLog log = snapshot.deltaLog();
    long version = snapshot.version();
    for (long v = version - 1; v >= Math.max(0, version - CHECKSUM_LOOKBACK); v--) {
      Option<VersionChecksum> earlier = log.readChecksum(v, Option.empty());
      if (earlier.isEmpty()) {
        continue;
      }
      Option<Long> found = batchIn(earlier.get(), appId);
      if (found.isEmpty()) {
        return found;
      }
      long batch = found.get();
      Iterator<Tuple2<Object, Seq<Action>>> changes =
          log.getChanges(v + 1, version, Option.empty(), true);
      while (changes.hasNext()) {
        Tuple2<Object, Seq<Action>> commit = changes.next();
        if ((Long) commit._1() > version) {
          break;
        }
        for (Action action : CollectionConverters.asJava(commit._2())) {
          if (action instanceof Metadata) {
            return Option.empty();
          }
          if (action instanceof SetTransaction t && t.appId().equals(appId)) {
            batch = t.version();
          }
        }
      }
      return Option.apply(batch);
    }
    return Option.empty();
  }

  /**
   * Runs {@code body} with {@code spark} as the thread's active session, as the DataFrameWriter's
   * command does: Delta reads its settings (e.g. a replay's snapshotPartitions, set on the
   * batch's session) from the active session.
   */
  private static <T> T withActive(SparkSession spark, Supplier<T> body) {
    Option<SparkSession> before = SparkSession.getActiveSession();
    SparkSession.setActiveSession(spark);
    try {
      return body.get();
    } finally {
      if (before.isDefined()) {
        SparkSession.setActiveSession(before.get());
      } else {
        SparkSession.clearActiveSession();
      }
    }
  }

  private static scala.collection.immutable.Map<String, String> immutableMap(
      Map<String, String> map) {
    return scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(map));
  }

  /**
   * A transaction that, once told to, reports no checkpoint due after its commit: Delta then
   * neither runs its checkpoint hook nor replays the new snapshot's state for the commit
   * statistics of a checkpoint version (their file count and size are telemetry). {@link
   * #checkpointDueAt} is Delta's own rule for the checkpoint StreamAppend writes later.
   */
  static final class DeferredCheckpointTransaction extends OptimisticTransaction {
    boolean deferCheckpoint;

    DeferredCheckpointTransaction(DeltaLog log) {
      super(log, Option.empty(), Option.<Snapshot>empty());
    }

    @Override
    public boolean isCheckpointNeeded(long committedVersion, Snapshot postCommitSnapshot) {
      return !deferCheckpoint && super.isCheckpointNeeded(committedVersion, postCommitSnapshot);
    }

    /** Delta's rule (TransactionHelper.isCheckpointNeeded) at the metadata this commit wrote. */
    boolean checkpointDueAt(long committedVersion) {
      return committedVersion != 0
          && committedVersion % deltaLog().checkpointInterval(metadata()) == 0;
    }
  }
}
