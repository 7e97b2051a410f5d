package io.deltaflow.cost;

import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;

/**
 * The task time of each FAIR scheduler pool: in a stream pool each member's jobs run in a
 * scheduler pool named after it, so this is a member's share of the task threads, the load the
 * operator places members by. The process's CPU is every member's and says nothing of one.
 *
 * <p>A task's time is its wall time from launch to end, as Spark's executor summaries count
 * it (the dedicated driver's measure, {@code LocalExecutors.totals}), so the two compare.
 */
public final class PoolTaskTime extends SparkListener {
  private static final String POOL = "spark.scheduler.pool";
  private static final ConcurrentHashMap<String, LongAdder> BUSY_MILLIS =
      new ConcurrentHashMap<>();
  private static final ConcurrentHashMap<Integer, String> STAGE_POOLS = new ConcurrentHashMap<>();
  private static SparkContext installedOn;

  private PoolTaskTime() {}

  /** Listen on {@code context} (once per context; later calls do nothing). */
  public static synchronized void install(SparkContext context) {
    if (installedOn != context) {
      context.addSparkListener(new PoolTaskTime());
      installedOn = context;
    }
  }

  /**
   * Seconds of task time the jobs of each scheduler pool ran so far, a {@code pool<TAB>seconds}
   * line each (a pool whose jobs ran no task yet has none): one py4j call a report round for
   * all the members, where a call each cost a quarter of an idle pool's Python time.
   */
  public static String busySeconds() {
    StringBuilder lines = new StringBuilder();
    BUSY_MILLIS.forEach(
        (pool, millis) ->
            lines.append(pool).append('\t').append(millis.sum() / 1000.0).append('\n'));
    return lines.toString();
  }

  @Override
  public void onStageSubmitted(SparkListenerStageSubmitted event) {
    Properties properties = event.properties();
    String pool = properties == null ? null : properties.getProperty(POOL);
    if (pool != null) {
      STAGE_POOLS.put(event.stageInfo().stageId(), pool);
    }
  }

  @Override
  public void onTaskEnd(SparkListenerTaskEnd event) {
    String pool = STAGE_POOLS.get(event.stageId());
    if (pool != null && event.taskInfo() != null) {
      BUSY_MILLIS.computeIfAbsent(pool, key -> new LongAdder()).add(event.taskInfo().duration());
    }
  }

  @Override
  public void onStageCompleted(SparkListenerStageCompleted event) {
    // Its tasks' ends came before, but for tasks killed after it (a stopped query's, a
    // speculative copy): a small undercount, never a leak.
    STAGE_POOLS.remove(event.stageInfo().stageId());
  }
}
