package io.deltaflow.cost;

import java.io.IOException;
import java.io.Serializable;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * What each executor costs: its JVM's CPU time and resident memory, sent to the driver over
 * Spark's plugin channel every few seconds and when it stops. The driver keeps the latest of
 * each executor (an executor id is never reused, so an executor that left still counts what it
 * used); the runtime reads the totals over py4j for the stream's cost in its status.
 *
 * <p>A local-mode "executor" is the driver's own JVM, which the runtime measures as a process:
 * it sends nothing.
 */
public final class ProcessCostPlugin implements SparkPlugin {
  /** How often an executor reports. */
  static final long PERIOD_SECONDS = 5;

  private static final ConcurrentHashMap<String, Received> LATEST = new ConcurrentHashMap<>();

  @Override
  public DriverPlugin driverPlugin() {
    return new Driver();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new Executor();
  }

  /** One executor's figures, as sent. */
  public static final class Sample implements Serializable {
    private static final long serialVersionUID = 1L;
    final String executorId;
    final long cpuNanos;
    final long rssBytes;
    final boolean last;

    Sample(String executorId, long cpuNanos, long rssBytes, boolean last) {
      this.executorId = executorId;
      this.cpuNanos = cpuNanos;
      this.rssBytes = rssBytes;
      this.last = last;
    }
  }

  private record Received(Sample sample, long atMillis) {}

  /** CPU seconds every executor of this application used so far, those gone included. */
  public static double executorCpuSeconds() {
    long nanos = 0;
    for (Received r : LATEST.values()) {
      nanos += r.sample().cpuNanos;
    }
    return nanos / 1e9;
  }

  /** Resident memory of the executors that reported within {@code freshMillis} and still run. */
  public static long executorRssBytes(long freshMillis) {
    long now = System.currentTimeMillis();
    long bytes = 0;
    for (Received r : LATEST.values()) {
      if (!r.sample().last && now - r.atMillis() <= freshMillis) {
        bytes += r.sample().rssBytes;
      }
    }
    return bytes;
  }

  /** How many executors have reported. */
  public static int executorsSeen() {
    return LATEST.size();
  }

  static final class Driver implements DriverPlugin {
    @Override
    public Object receive(Object message) {
      if (message instanceof Sample s) {
        long now = System.currentTimeMillis();
        // Messages of one executor may arrive out of order: its CPU time only grows.
        LATEST.merge(
            s.executorId,
            new Received(s, now),
            (old, fresh) -> fresh.sample().cpuNanos >= old.sample().cpuNanos ? fresh : old);
      }
      return null;
    }
  }

  static final class Executor implements ExecutorPlugin {
    private ScheduledExecutorService timer;
    private PluginContext context;

    @Override
    public void init(PluginContext ctx, Map<String, String> extraConf) {
      if ("driver".equals(ctx.executorID())) {
        return;
      }
      context = ctx;
      timer =
          Executors.newSingleThreadScheduledExecutor(
              r -> {
                Thread t = new Thread(r, "deltaflow-cost");
                t.setDaemon(true);
                return t;
              });
      timer.scheduleAtFixedRate(() -> send(false), 0, PERIOD_SECONDS, TimeUnit.SECONDS);
    }

    @Override
    public void shutdown() {
      if (timer == null) {
        return;
      }
      timer.shutdownNow();
      send(true);
    }

    private void send(boolean last) {
      try {
        context.send(new Sample(context.executorID(), cpuNanos(), rssBytes(), last));
      } catch (IOException | RuntimeException e) {
        // The driver may be gone or busy: the next sample carries the totals again.
      }
    }
  }

  static long cpuNanos() {
    if (ManagementFactory.getOperatingSystemMXBean()
        instanceof com.sun.management.OperatingSystemMXBean os) {
      return Math.max(0, os.getProcessCpuTime());
    }
    return 0;
  }

  static long rssBytes() {
    try {
      for (String line :
          Files.readAllLines(Path.of("/proc/self/status"), StandardCharsets.US_ASCII)) {
        if (line.startsWith("VmRSS:")) {
          return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
        }
      }
    } catch (IOException | NumberFormatException e) {
      // Not Linux, or no procfs: unknown.
    }
    return 0;
  }
}
