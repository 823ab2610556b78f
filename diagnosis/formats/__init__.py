"""Evidence bundle formats, recognised by content; importing this package registers every format in FORMATS.

One module per family: alertmanager, kubernetes (`kubectl get -o json` / `-o yaml`), kubetext (`kubectl describe`
and `kubectl get` tables), prometheus, aws (CloudWatch metrics and alarm history, RDS, Performance Insights),
cloudlogs (CloudWatch Logs, Google Cloud Logging and Azure Monitor log exports), datadog, docker (`docker inspect`
and `docker ps`), postgres (also pasted from psql), health (status pages, AWS Health, search cluster health),
hosttext, and logs (the catch-all for text and JSON-lines logs, offered last; then untimed error lines).
"""

from diagnosis.formats import (
    alertmanager,
    aws,
    cloudlogs,
    datadog,
    docker,
    health,
    hosttext,
    kubernetes,
    kubetext,
    logs,
    postgres,
    prometheus,
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
    "cloudlogs",
    "datadog",
    "describe_unknown",
    "docker",
    "health",
    "hosttext",
    "kubernetes",
    "kubetext",
    "logs",
    "postgres",
    "prometheus",
    "sniff",
]
