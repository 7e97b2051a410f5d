package io.deltaflow.kafka;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;

/**
 * Can the Java Kafka client connect, authenticate and see the topic with exactly these
 * properties? The properties are the ones Spark's Kafka source gets, without the {@code kafka.}
 * prefix: an AdminClient built from them calls describeCluster and, when the pseudo-property
 * {@value #TOPIC} names a topic, describeTopics on it.
 *
 * <p>This finds what only the Java client sees: a JAAS line it cannot parse, a login module,
 * callback handler or library missing from the classpath (jose4j for OAUTHBEARER, the AWS_MSK_IAM
 * classes), a path the config provider refuses, a PEM the Java key store rejects, besides the
 * broker's answers (handshake, authentication, authorization, unknown topic).
 *
 * <p>Never throws: the answer is {@code {"ok": "true"}}, or {@code {"ok": "false",
 * "exceptionClass": ..., "message": ..., "exceptionChain": ...}} with the class and message of
 * the innermost cause and the class names of the whole chain, outermost first, comma-separated
 * (an SSL failure's root is the JDK's certificate path error, its chain names Kafka's
 * SslAuthenticationException).
 */
public final class ConnectCheck {
  /** The topic to describe: read and removed before the client sees the properties. */
  public static final String TOPIC = "deltaflow.check.topic";

  /** Every key under this prefix is the check's own, never handed to the client. */
  public static final String OWN_PREFIX = "deltaflow.check.";

  /** How long closing the client may take (it has nothing to flush). */
  private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(1);

  /** Beyond the call's own timeout, for the client to fail the call itself. */
  private static final long GRACE_MS = 2_000;

  private ConnectCheck() {}

  /**
   * Runs the check.
   *
   * @param props the Kafka client properties, plus {@value #TOPIC} if a topic is to be described
   * @param timeoutMs how long each call may take (the request timeout too, unless props set one)
   */
  public static Map<String, String> check(Map<String, String> props, int timeoutMs) {
    try {
      return run(props, timeoutMs);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return failure(e);
    } catch (Throwable e) { // NoClassDefFoundError and friends are what this check is for
      return failure(e);
    }
  }

  private static Map<String, String> run(Map<String, String> props, int timeoutMs)
      throws Exception {
    Map<String, Object> config = new HashMap<>();
    String topic = null;
    for (Map.Entry<String, String> e : props.entrySet()) {
      if (TOPIC.equals(e.getKey())) {
        topic = e.getValue();
      } else if (!e.getKey().startsWith(OWN_PREFIX)) {
        config.put(e.getKey(), e.getValue());
      }
    }
    config.putIfAbsent(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
    config.putIfAbsent(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
    config.putIfAbsent(AdminClientConfig.CLIENT_ID_CONFIG, "deltaflow-connect-check");
    Admin admin = Admin.create(config);
    try {
      admin
          .describeCluster(new DescribeClusterOptions().timeoutMs(timeoutMs))
          .clusterId()
          .get(timeoutMs + GRACE_MS, TimeUnit.MILLISECONDS);
      if (topic != null && !topic.isEmpty()) {
        admin
            .describeTopics(List.of(topic), new DescribeTopicsOptions().timeoutMs(timeoutMs))
            .allTopicNames()
            .get(timeoutMs + GRACE_MS, TimeUnit.MILLISECONDS);
      }
    } finally {
      admin.close(CLOSE_TIMEOUT);
    }
    Map<String, String> ok = new LinkedHashMap<>();
    ok.put("ok", "true");
    return ok;
  }

  private static Map<String, String> failure(Throwable e) {
    List<String> chain = new ArrayList<>();
    Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
    Throwable root = e;
    for (Throwable t = e; t != null && seen.add(t); t = t.getCause()) {
      chain.add(t.getClass().getName());
      root = t;
    }
    Map<String, String> answer = new LinkedHashMap<>();
    answer.put("ok", "false");
    answer.put("exceptionClass", root.getClass().getName());
    answer.put("message", String.valueOf(root.getMessage()));
    answer.put("exceptionChain", String.join(",", chain));
    return answer;
  }

  /**
   * {@code ConnectCheck <properties file> [timeout ms]}: runs the check with the file's
   * properties and prints the answer as one JSON line on stdout. Exits 0 when the check passed,
   * 1 when it did not, 2 on a usage or file error.
   */
  public static void main(String[] args) {
    // UTF-8 whatever the platform's default (the image's is, a laptop's may not be).
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    if (args.length < 1 || args.length > 2) {
      System.err.println("usage: ConnectCheck <kafka client properties file> [timeout ms]");
      System.exit(2);
    }
    Properties file = new Properties();
    try (InputStream in = Files.newInputStream(Paths.get(args[0]))) {
      file.load(in);
    } catch (IOException e) {
      System.err.println("cannot read " + args[0] + ": " + e);
      System.exit(2);
    }
    int timeoutMs = 10_000;
    if (args.length == 2) {
      try {
        timeoutMs = Integer.parseInt(args[1]);
      } catch (NumberFormatException e) {
        System.err.println("not a timeout in milliseconds: " + args[1]);
        System.exit(2);
      }
    }
    Map<String, String> props = new HashMap<>();
    for (String name : file.stringPropertyNames()) {
      props.put(name, file.getProperty(name));
    }
    Map<String, String> answer = check(props, timeoutMs);
    out.println(toJson(answer));
    out.flush();
    System.exit("true".equals(answer.get("ok")) ? 0 : 1);
  }

  /** A flat JSON object of strings. */
  static String toJson(Map<String, String> map) {
    StringBuilder json = new StringBuilder("{");
    for (Map.Entry<String, String> e : map.entrySet()) {
      if (json.length() > 1) {
        json.append(", ");
      }
      quote(json, e.getKey());
      json.append(": ");
      quote(json, e.getValue());
    }
    return json.append('}').toString();
  }

  private static void quote(StringBuilder json, String text) {
    json.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"':
          json.append("\\\"");
          break;
        case '\\':
          json.append("\\\\");
          break;
        case '\n':
          json.append("\\n");
          break;
        case '\r':
          json.append("\\r");
          break;
        case '\t':
          json.append("\\t");
          break;
        default:
          if (c < 0x20) {
            json.append(String.format("\\u%04x", (int) c));
          } else {
            json.append(c);
          }
      }
    }
    json.append('"');
  }
}
