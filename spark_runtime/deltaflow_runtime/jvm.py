"""The one module that reaches through PySpark into the JVM (py4j), the way the operator's
``kube.py`` holds the Kubernetes client. PySpark's private handles (``_jvm``, ``_jsc``,
``_gateway``, ``_jsparkSession``, ``_jc``, ``_jo``) are read here only (a unit test checks it), so
a PySpark upgrade that moves one breaks this module, not six. What the runtime does with the
Java objects (Delta's log, Hadoop's FileSystem, Spark's scheduler backend, Catalyst
expressions) stays where it is used; every such object is ``Any`` to the type checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import Column, DataFrame, Observation, SparkSession


def active_context() -> SparkContext:
    """The running SparkContext (per-record code builders run on the driver, inside one)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    assert context is not None, "no active SparkContext"
    return context


def jvm(spark: SparkSession | None = None) -> Any:
    """The py4j view of the driver's JVM: ``jvm(spark).org.apache...``."""
    context = spark.sparkContext if spark is not None else active_context()
    return context._jvm


def java_session(spark: SparkSession) -> Any:
    """The session's ``org.apache.spark.sql.SparkSession``."""
    return spark._jsparkSession


def scala_context(spark: SparkSession) -> Any:
    """The session's ``org.apache.spark.SparkContext`` (its scheduler backend, executors)."""
    return spark.sparkContext._jsc.sc()


def hadoop_conf(spark: SparkSession) -> Any:
    """The session's live Hadoop ``Configuration`` (copy it before changing anything)."""
    return spark.sparkContext._jsc.hadoopConfiguration()


def hadoop_path(path: str, spark: SparkSession | None = None) -> Any:
    """An ``org.apache.hadoop.fs.Path``."""
    return jvm(spark).org.apache.hadoop.fs.Path(path)


def java_array(element_class: Any, items: list[Any], spark: SparkSession | None = None) -> Any:
    """A Java array of ``element_class`` holding ``items``."""
    context = spark.sparkContext if spark is not None else active_context()
    gateway: Any = context._gateway
    array = gateway.new_array(element_class, len(items))
    for i, item in enumerate(items):
        array[i] = item
    return array


def java_class(name: str) -> Any:
    """The ``java.lang.Class`` of ``name``, loaded the way py4j loads classes."""
    return jvm().py4j.reflection.ReflectionUtil.classForName(name)


def expression(column: Column) -> Any:
    """The Catalyst expression of a Column."""
    return jvm().org.apache.spark.sql.classic.ExpressionUtils.expression(column._jc)


def column(catalyst_expression: Any) -> Column:
    """A Column of a Catalyst expression."""
    from pyspark.sql import Column

    return Column(jvm().org.apache.spark.sql.classic.ExpressionUtils.column(catalyst_expression))


def java_udf(instance: Any, name: str, argument: Column) -> Column:
    """A Java ``UDF1`` instance over one column, returning a string. A UDF rather than
    ``java_method``: no reflective call per record, and bytes need no conversion to text."""
    from pyspark.sql import Column
    from pyspark.sql.classic.column import _to_java_column, _to_seq

    java = jvm()
    # functions.udf(UDF1, DataType), chosen by its signature: left to py4j, the overload is
    # picked at run time among those that fit, sometimes the untyped udf(Object, DataType),
    # which Spark refuses (UNTYPED_SCALA_UDF).
    signature = java_array(
        java.java.lang.Class,
        [
            java_class("org.apache.spark.sql.api.java.UDF1"),
            java_class("org.apache.spark.sql.types.DataType"),
        ],
    )
    typed_udf = java_class("org.apache.spark.sql.functions").getMethod("udf", signature)
    arguments = java_array(
        java.java.lang.Object, [instance, java.org.apache.spark.sql.types.DataTypes.StringType]
    )
    udf = typed_udf.invoke(None, arguments).withName(name)
    return Column(udf.apply(_to_seq(active_context(), [argument], _to_java_column)))


def java_frame(frame: DataFrame) -> Any:
    """The DataFrame's ``org.apache.spark.sql.Dataset``."""
    return frame._jdf


def observation_handle(observation: Observation) -> Any:
    """The Java side of a PySpark ``Observation`` (its metrics future)."""
    return observation._jo


def stop_jvm(timeout: float) -> None:
    """End this process's driver JVM (after ``SparkSession.stop()``) and wait until it has
    exited: what it does at exit (e.g. writing a class-data archive) is then done."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:
        raise RuntimeError("no driver JVM started by this process")
    gateway.shutdown()
    process.stdin.close()  # PySpark's gateway server exits when its stdin ends
    process.wait(timeout=timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None
