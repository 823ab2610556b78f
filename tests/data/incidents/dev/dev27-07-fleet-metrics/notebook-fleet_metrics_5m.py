# Databricks notebook source
# fleet_metrics_5m: 5-minute per-depot aggregates for the ops dashboard
from pyspark.sql import functions as F, types as T

schema = T.StructType([
    T.StructField("device_id", T.StringType()), T.StructField("fw", T.StringType()),
    T.StructField("ts", T.LongType()), T.StructField("lat", T.DoubleType()), T.StructField("lon", T.DoubleType()),
    T.StructField("speed_kmh", T.DoubleType()), T.StructField("fuel_pct", T.DoubleType()), T.StructField("reefer_c", T.DoubleType()),
])

events = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", dbutils.secrets.get("data", "kafka_bootstrap"))
          .option("subscribe", "fleet.telemetry.v3")
          .option("startingOffsets", "latest")
          .load()
          .select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
          .withColumn("event_time", (F.col("ts") / 1000).cast("timestamp")))

agg = (events.withWatermark("event_time", "10 minutes")
       .join(spark.table("ref.device_depot"), "device_id")
       .groupBy(F.window("event_time", "5 minutes"), "depot")
       .agg(F.count("*").alias("pings"), F.avg("speed_kmh").alias("avg_speed"), F.max("reefer_c").alias("max_reefer_c")))

(agg.writeStream.format("delta").outputMode("append")
    .option("checkpointLocation", "dbfs:/mnt/lake/_chk/fleet_metrics_5m")
    .trigger(processingTime="30 seconds")
    .toTable("gold.fleet_metrics_5m"))
