"""Evidence bundle formats, recognised by content; importing this package registers every format in FORMATS.

One module per family: alertmanager (also Grafana-managed alerts), kubernetes (`kubectl get -o json` / `-o yaml`),
kubetext (`kubectl describe` and `kubectl get` tables), prometheus (also Graphite's render API), newrelic (NRQL
results from NerdGraph), aws (CloudWatch metrics and alarm history, RDS, Performance Insights, ECS services), awsnet
(VPC flow logs, security groups), azure (Azure Monitor's common alert schema, metrics, Application Insights query
results), gcp (Cloud Monitoring time series), balancers (Application Gateway backend health, ELB target health),
changes (change records: a planned change's window, state and work notes; helm history), cloudlogs (CloudWatch Logs
and Logs Insights, Google Cloud Logging with its request logs, Azure Monitor log exports), logstores (Loki and
Elasticsearch/OpenSearch query results, Splunk search results), traces (Jaeger, OTLP/JSON and Zipkin spans, read as
each service's log, and OTLP/JSON logs), paging (PagerDuty and Opsgenie incidents, read as alerts), pipelines (dbt
run results, Kafka Connect status), datadog, docker (`docker inspect` and `docker ps`), dumps (JVM thread dumps, Go
goroutine dumps, JVM class histograms), profiles (CPU profiles: node --prof-process, pprof -top, perf report),
postgres (also pasted from psql), tables (any other query result pasted from a SQL client, and CSV heads), mysql
(lock waits and transactions pasted from the mysql client, read as PostgreSQL's sessions and locks), health (status
pages, AWS Health, search cluster health), hostlogs (Linux audit records, IBM MQ error logs), hosttext (df, redis
INFO, resolv.conf, iostat, ping, ethtool), cassandra (nodetool status, keyspace replication), messages (message
samples: SQS and Pub/Sub peeks, kcat and console consumers, captured webhook deliveries), workers (Cloudflare Workers'
tail and logs), platforms (what PaaS platforms export: dashboard series, Fly.io machines), and logs (the catch-all
for text and JSON-lines logs, offered last; then mail files read as logs (mail), dated events in JSON of no known
shape (jsonevents), then untimed error lines).
"""

from diagnosis.formats import (
    alertmanager,
    aws,
    awsnet,
    azure,
    balancers,
    cassandra,
    changes,
    cloudlogs,
    datadog,
    docker,
    dumps,
    gcp,
    health,
    hostlogs,
    hosttext,
    jsonevents,
    kubernetes,
    kubetext,
    logs,
    logstores,
    mail,
    messages,
    mysql,
    newrelic,
    paging,
    pipelines,
    platforms,
    postgres,
    profiles,
    prometheus,
    tables,
    traces,
    workers,
)
from diagnosis.formats.base import (
    FORMATS,
    Document,
    Format,
    FormatError,
    FormatRegistry,
    NotReadable,
    ParseContext,
    describe_unknown,
    sniff,
)

__all__ = [
    "FORMATS",
    "Document",
    "Format",
    "FormatError",
    "FormatRegistry",
    "NotReadable",
    "ParseContext",
    "alertmanager",
    "aws",
    "awsnet",
    "azure",
    "balancers",
    "cassandra",
    "changes",
    "cloudlogs",
    "datadog",
    "describe_unknown",
    "docker",
    "dumps",
    "gcp",
    "health",
    "hostlogs",
    "hosttext",
    "jsonevents",
    "kubernetes",
    "kubetext",
    "logs",
    "logstores",
    "mail",
    "messages",
    "mysql",
    "newrelic",
    "paging",
    "pipelines",
    "platforms",
    "postgres",
    "profiles",
    "prometheus",
    "sniff",
    "tables",
    "traces",
    "workers",
]
