"""Evidence bundle formats, recognised by content; importing this package registers every format in FORMATS.

One module per family: alertmanager, kubernetes, prometheus, aws (CloudWatch, RDS, Performance Insights),
datadog, postgres, and logs (the catch-all for text and JSON-lines logs, offered last).
"""

from diagnosis.formats import alertmanager, aws, datadog, hosttext, kubernetes, logs, postgres, prometheus
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
    "datadog",
    "describe_unknown",
    "hosttext",
    "kubernetes",
    "logs",
    "postgres",
    "prometheus",
    "sniff",
]
