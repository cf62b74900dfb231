"""The catalogue on Apache Spark, for a store that outgrows one machine: the same ``queries/*.sql``, translated
to Spark SQL with sqlglot, over the store's Parquet files (a local folder or any URI Spark reads).

::

    from pyspark.sql import SparkSession
    import atlas.spark

    spark = SparkSession.builder.getOrCreate()
    atlas.spark.register(spark, "s3a://bucket/atlas-store")   # the tables as temporary views
    spark.sql("SELECT layer, head, avg(entropy) FROM attn_rows GROUP BY ALL").show()
    atlas.spark.query(spark, "s3a://bucket/atlas-store", "best head per dependency relation", min_count=50)

Importing this package imports no pyspark; the functions that need it say how to install it where it is missing.
"""

from atlas.spark.engine import (
    INSTALL,
    EnvURI,
    SparkAnswer,
    SparkEngine,
    answer,
    collect,
    query,
    register,
    require_pyspark,
    session,
    store_uri,
)
from atlas.spark.sql import SparkSQL, entry_sql, translate

__all__ = [
    "INSTALL",
    "EnvURI",
    "SparkAnswer",
    "SparkEngine",
    "SparkSQL",
    "answer",
    "collect",
    "entry_sql",
    "query",
    "register",
    "require_pyspark",
    "session",
    "store_uri",
    "translate",
]
