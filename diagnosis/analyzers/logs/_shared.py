"""What the log rules share: when errors have stopped or are a steady background, and the expressions that
name bad data, exceptions, a remote failure and an application out of memory."""

from __future__ import annotations

import re

from diagnosis.model import EvidenceItem

# An error template whose last record is this long before "now" has stopped: the fault recovered (15 min is
# three times the usual 5-minute alert evaluation window, long enough that "still failing" would show).
STOPPED_AFTER_S = 15 * 60
LOG_START_SLACK_S = 60.0  # errors within this of a log's first record began at or before the log did
# errors that are the last thing their log says are stopped only this long before now
ENDED_LONG_AGO_S = 60 * 60
# A background is errors present over most of a long log at a low, even rate: at most 2 a minute, spread over
# at least 60% of a log that covers 30 minutes or more, with no 5-minute bucket above 3x the typical one.
# a batch run's summary that reports failures ("run 20250211-1130 finished: 0 ok, 42 failed"): its errors are the
# run's outcome, not a past episode, however long the log went on after them
_RUN_FAILED = re.compile(
    r"\b(?:finished|completed|ended|done)\b[^\n]{0,80}?\b[1-9]\d*\s+(?:failed|failures?|errors?)\b|"
    r"\b(?:finished|completed) with (?:errors|failures)\b|\bstatus[=: ]+FAILED\b|"
    # systemd's outcome of a unit's run (a oneshot batch, a timer's service)
    r"\bFailed with result '|\bFailed to start \S",
    re.I,
)
# a later run that went well: the failed one before it is over
_RUN_OK = re.compile(
    r"\bDeactivated successfully\b|\bFinished \S|\bSucceeded\.|\bcompleted successfully\b|"
    r"\bstatus[=: ]+(?:SUCCESS|OK)\b",
    re.I,
)


def last_failed_run(item: EvidenceItem) -> float | None:
    """When the log last reports a run that finished with failures (one pass over its records)."""
    last: float | None = None
    for r in item.data.get("records") or ():
        t, msg = r.get("ts"), str(r.get("msg") or "")
        if not isinstance(t, int | float):
            continue
        if ("fail" in msg.lower() or "error" in msg.lower() or "FAILED" in msg) and _RUN_FAILED.search(msg):
            last = t if last is None else max(last, t)
        elif last is not None and t > last and _RUN_OK.search(msg):
            last = None  # a later run succeeded
    return last


def run_failed_after(item: EvidenceItem, ts: float | None) -> bool:
    """Whether the log reports, after `ts`, a run that finished with failures."""
    return ts is not None and (last := last_failed_run(item)) is not None and last > ts


BACKGROUND_MIN_SPAN_S = 30 * 60
BACKGROUND_MIN_COUNT = 4  # occurrences it takes to call a rate steady
BACKGROUND_MAX_RATE_PER_MIN = 2.0
BACKGROUND_COVERAGE = 0.6
BACKGROUND_BURST_FACTOR = 3.0
# ... and beginning within the first fifth of the log: errors that start after a clean stretch are new
BACKGROUND_LATE_START = 0.2
# ... and a small share of a log that says more than its errors: at most 15% of its lines, when at least 20
# other lines show what the service does (an export of error lines only says nothing of the share)
BACKGROUND_MAX_SHARE = 0.15
BACKGROUND_MIN_OTHERS = 20
# Fewer occurrences than this are sporadic: the finding is kept below the reasoning's stand-alone score (0.5), so it
# names the cause only when it explains something observed (a crash, a restart), not on a healthy system.
SPORADIC = 3
FEW_ERRORS, FEW_ERRORS_AMONG, FEW_ERRORS_SHARE = 4, 50, 0.02  # at most 4 errors in 50+ lines, under 2% of them
# A deploy this long before the first exception makes the deploy the likely origin of the bug.
DEPLOY_WINDOW_S = 2 * 3600
ROLLOUT_SLACK_S = 300

BAD_DATA = re.compile(
    # generic wording of rejected input
    r"invalid input (?:syntax|value)|schema mismatch|unexpected null|null value in column|fail(?:ed)? to parse|"
    r"parse error|"
    # BigQuery refusing rows whose values do not fit the table's schema (insertAll's per-row errors)
    r"This field: \S+ is not a record|no such field: \S+\.|Cannot convert value to (?:integer|floating point|boolean)|"
    # a validator refusing a record's shape: "payload validation failed", "expected integer, got string"
    r"(?:payload|record|schema|message|input|event|row|batch|document|body) validation failed|failed validation\b|"
    r"expected (?:an? )?(?:integer|int|number|string|boolean|bool|object|array|float|decimal)\b,? (?:but )?"
    r"(?:got|found|received)\b|"
    r"could not parse|unable to parse|cannot parse|(?<!#)malformed(?! or connection to the instance|-response)|"
    r"missing (?:required )?(?:field|property|key)|"
    r"required (?:field|property) \S+ (?:is )?missing|unexpected (?:token|field|type|character|end of (?:json )?input)|"
    r"invalid (?:json|format|value|record|payload|utf-?8|byte sequence|character|date|timestamp|enum|message)|"
    # a validator's per-record verdict with its reason code ("REJECT file=x.csv line=2 reason=DURATION_OUT_OF_RANGE")
    r"\bREJECT(?:ED)?\b[^\n]{0,120}\breason=[A-Z_]*(?:OUT_OF_RANGE|INVALID|MALFORMED|MISSING|UNPARSEABLE|BAD)|"
    # a recipient the SMS or mail provider refuses as written (Vonage status 3, Twilio 21211, SES)
    r"Invalid (?:'?To'? (?:address|phone number)|(?:phone|mobile|MSISDN|recipient|destination) number)\b|"
    r"is not valid JSON|deserializ\w+ (?:error|failed|exception)|error deserializing|failed to (?:deserializ|decod)\w*|"
    r"violates (?:not-null|check|foreign key) constraint|type mismatch|"
    # SQLite's (and Cloudflare D1's) words for the same refusals
    r"(?:NOT NULL|CHECK|FOREIGN KEY) constraint failed|"
    # CSV readers on a file with another delimiter or a ragged row (Rust csv, Python csv, pandas, Go encoding/csv)
    r"found record with \d+ fields?|wrong number of fields|expected \d+ fields?,? (?:saw|got|but)|"
    r"Error tokenizing data|header has \d+ columns?|"
    # a quote or column the file breaks (PostgreSQL COPY, Go encoding/csv, pandas)
    r"unterminated CSV quoted field|BadCopyFileFormat|extra data after last expected column|"
    r"missing data for column|unquoted (?:carriage return|newline) found in data|bare \" in non-quoted[- ]field|"
    r"extraneous or missing \" in quoted[- ]field|EOF inside string|"
    # a columnar file whose column type is not the declared one (Spark reading Parquet)
    r"Parquet column cannot be converted|SchemaColumnConvertNotSupportedException|"
    # a Parquet file that is empty or cut short (pyarrow, Spark, DuckDB): no footer to read
    r"Parquet file size is 0 bytes|Parquet magic bytes not found|Invalid Parquet file size|is not a Parquet file|"
    r"column \S+ does not exist|no such column|"
    r"schema validation failed|incompatible schema|schema (?:is )?incompatible|"
    r"unknown (?:field|column|magic byte)|Unrecognized field|value too long for type|out of range for type|"
    r"invalid literal for \w+\(\)|could not convert string to \w+|does not match format|"
    # a value the database could not convert to its column's type (SQL Server 241/245/8114, MySQL, PostgreSQL)
    r"Conversion failed when converting|Error converting data type|Incorrect (?:date|datetime|integer|decimal) value:|"
    r"invalid input syntax for (?:type )?\w+|date/time field value out of range|"
    # warehouses casting a loaded value: Snowflake 100038/100040, BigQuery, Redshift
    r"(?:Numeric|Date|Timestamp|Time|Boolean) value '[^']*' is not recognized|Can't parse '[^']*' as |"
    r"Bad (?:int64|double|numeric|bool|date|timestamp) value|Could not parse '[^']*' as |Invalid digit, Value '|"
    r"duplicate key value|Duplicate entry|duplicate (?:record|row|message|event|id)s?\b|duplicate [a-z]+_id\b|"
    # a unique index or constraint the rows already in a table break (PostgreSQL, SQL Server, Oracle)
    r"could not create unique index|Key \([^)\n]*\)=\([^)\n]*\) is duplicated|"
    r"CREATE UNIQUE INDEX statement terminated because a duplicate key|cannot CREATE UNIQUE INDEX; duplicate keys|"
    # a MERGE whose source holds a key twice (Delta, Snowflake, BigQuery)
    r"multiple source rows matched|Duplicate row detected during DML|must match at most one source row|"
    r"poison(?:ed)? (?:message|pill|record)|"
    # rejected rows and dead-lettered records, column counts, NaN, corrupt input, failed data checks
    r"rejected \d+ (?:rows|records|messages|documents|lines|events)|(?:rows|records|messages|events) rejected|"
    # a share of a batch refused ("1,858 rejected (97.43%)"), and an input in a format the reader cannot decode (an
    # image library handed HEIC named .jpg)
    r"\d[\d,]* rejected \([\d.]+ ?%\)|\bbatch rejected\b|\d+/\d+ records failed \([\d.]+ ?%\)|"
    # Salesforce's per-record refusals of what a load sends
    r"INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST|REQUIRED_FIELD_MISSING|FIELD_CUSTOM_VALIDATION_EXCEPTION|"
    r"STRING_TOO_LONG|INVALID_EMAIL_ADDRESS|NUMBER_OUTSIDE_VALID_RANGE|MALFORMED_ID\b|"
    # a value a validator finds implausible against yesterday's or a range (a rate inverted, a price at zero)
    # (not Kafka Connect's "Tolerance exceeded in error handler": any failure of a task with errors.tolerance=none)
    r"(?:tolerance|sanity[- ]check|plausibility check|range check) (?:exceeded|failed)(?! in error handler)|"
    r"outside (?:the )?(?:tolerance|expected range|plausible range|allowed range)\b|"
    r"unsupported (?:image|file|media|input|audio|video|content) (?:format|type)|UnidentifiedImageError|"
    r"cannot identify image file|Not a JPEG file|not a valid (?:image|JPEG|PNG|GIF|WebP) file|"
    # a media file cut short or not media at all (ffprobe/ffmpeg, MP4 readers)
    r"moov atom not found|Invalid data found when processing input|could not find codec parameters|"
    # (a message dead-lettered because its delivery count ran out failed every try: why is in those tries' errors)
    r"(?<!will be )(?:sent|routed|moved|published|written|forwarded) to (?:the )?(?:dead[- ]?letter|DLQ|DLT)"
    r"(?![^\n]{0,80}(?:MaxDeliveryCount|max(?:imum)? ?delivery|maxReceiveCount|retries exhausted))|"
    r"expected \d+ (?:columns|fields),? (?:but )?(?:got|found|saw) \d+|wrong number of (?:columns|fields)|"
    # CSV readers on a file with another delimiter or column count (Rust csv, Go encoding/csv, a header check)
    r"found record with \d+ fields?, but the previous record has \d+|wrong number of fields|"
    # a file that starts with a byte-order mark (read as Latin-1: "ï»¿"), EDI envelopes (X12, EDIFACT) and HL7
    # messages a translator cannot read
    r"\u00ef\u00bb\u00bf|\ufeff|byte[- ]order mark|\bBOM\b|invalid interchange header|Unrecognis?z?ed envelope|"
    r"X12ParseException|EdifactParseException|EncodingNotSupportedException|HL7Exception|"
    # Spring Batch's flat-file reader; BigQuery and other warehouses giving up on a load's rows
    r"Incorrect number of tokens found in record|IncorrectTokenCountException|FlatFileParseException|"
    r"(?:CSV|JSON|Avro|Parquet) table encountered too many errors|Too many (?:values|columns|fields) in (?:row|line)|"
    r"\bheader has \d+ (?:column|field)s?(?:\(s\))?,? (?:but )?expected \d+|"
    # a batch refused as a whole because too much of it failed validation
    r"reject(?:ed|ion) (?:share|ratio|rate) (?:of )?[\d.]+ ?% (?:is )?(?:above|over|exceeds)|"
    r"(?:moved|sent) (?:\S+ )?to (?:the )?quarantine\b|"
    r"Error tokenizing data|contains NaN|\bNaN (?:value|found|in column)|value is NaN|"
    r"corrupt(?:ed)? (?:record|row|message|input|gzip|parquet|avro|csv)|"
    # a file that arrived cut short or damaged (gzip -t, a warehouse's COPY, a reader hitting its end early)
    r"invalid data encountered|unexpected end of (?:file|stream|data|input)|not in gzip format|"
    # a file in another character set than the reader's (DuckDB, Rust, Python, Go)
    r"invalid unicode|byte sequence mismatch|(?:file|input|stream) (?:is|was) not utf-?8(?: encoded)?|"
    r"did not contain valid UTF-?8|invalid continuation byte|invalid start byte|"
    # a validator naming the field and the value it refused: invalid amount "12,50": expected ...
    r"invalid [a-z_]{2,30} [\"'][^\"']{0,60}[\"']: expected|"
    r"premature end of (?:file|data|stream)|truncated (?:file|gzip|archive|input)|crc (?:check failed|mismatch)|"
    r"checksum mismatch|computed checksums? did NOT match|"
    # a search index's mapping refusing a document's field (Elasticsearch/OpenSearch)
    r"mapper_parsing_exception|failed to parse field \[|document_parsing_exception|"
    r"data (?:quality|validation) (?:check )?failed|expectation (?:suite )?failed|"
    r"(?:not_null|unique|accepted_values|relationships) test failed|"
    # Java/Kotlin: Jackson, Kafka serdes, Avro, protobuf, java.time, charsets, bean validation
    r"Json(?:Parse|Mapping|EOF)Exception|MismatchedInputException|InvalidFormatException|"
    r"UnrecognizedPropertyException|InvalidDefinitionException|SerializationException|RecordDeserializationException|"
    r"DeserializationException|InvalidProtocolBufferException|AvroTypeException|SchemaParseException|"
    r"DateTimeParseException|NumberFormatException|MalformedInputException|UnmappableCharacterException|"
    r"CharacterCodingException|ConstraintViolationException|DataIntegrityViolationException|HttpMessageNotReadable|"
    # XML parsers on an input file in the wrong encoding or not XML at all (.NET, Java SAX, libxml2/lxml, expat)
    r"XmlException|SAXParseException|XMLSyntaxError|ExpatError|Content is not allowed in prolog|"
    r"Data at the root level is invalid|Invalid byte \d of \d-byte UTF-8|not well-formed \(invalid token\)|"
    r"DecoderFallbackException|(?:unexpected|invalid|unsupported) (?:byte order mark|BOM)|"
    # Python, Go, Node, Ruby
    r"JSONDecodeError|UnicodeDecodeError|UnicodeEncodeError|Expecting value: line \d+|decimal\.ConversionSyntax|"
    # API Gateway's request validation against its model, and other gateways' schema validation of a request body
    r"Request body does not match model schema|"
    r"request (?:body|payload) (?:failed|does not pass) (?:schema )?validation|"
    # pydantic and jsonschema refusing a record of the wrong shape
    r"\d+ validation errors? for \w+|Input should be a valid \w+|is not of type '\w+'|"
    # .NET: System.Text.Json and Newtonsoft on a value of the wrong shape, and a number that does not parse
    r"System\.Text\.Json\.JsonException|JsonReaderException|JsonSerializationException|"
    r"could not be converted to System\.\w+|Input string was not in a correct format|"
    r"json: cannot unmarshal|invalid character '.{1,4}' (?:looking for|after|in)|cannot unmarshal|"
    # a stored document whose field has another type than the code's struct (mongo-go-driver's bson, serde)
    r"error decoding key [\w.\[\]]+: cannot decode|cannot decode \w+ into an? \w+|"
    r"invalid type: \w+ (?:\S+ )?, expected|"
    # MongoDB's aggregation on a field of another type than it computes with ($multiply over strings, $convert)
    r"only supports numeric types, not \w+|can't convert from BSON type \w+ to|Unsupported conversion from \w+ to|"
    r"strconv\.\w+: parsing|"
    r"proto: cannot parse|parsing time \S+ as|JSON::ParserError|ActiveRecord::RecordInvalid|invalid byte sequence in|"
    r"Encoding::(?:Undefined|InvalidByteSequence)\w*|"
    # MySQL / PostgreSQL data errors (SQLSTATE class 22 and 23)
    r"Incorrect (?:string|integer|decimal|datetime|date) value|Data truncated for column|Data too long for column|"
    r"Out of range value for column|Column '\w+' cannot be null|Unknown column|has no equivalent in encoding|"
    r"date/time field value out of range|SQLSTATE\[?2[23]\d{3}",
    re.I,
)
# The exception class (or phrase) that names the bad data in a message: the innermost one (Java prints causes last)
_DATA_CLASS = re.compile(r"\b((?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Exception|Error))\b")
# a consumer stuck on one record: Kafka's "Seeking to offset 88213 for partition postings-3", spring-kafka's
# "...-3@88213", librdkafka's "[3] offset 88213"
_OFFSET = re.compile(
    r"offset[\s=:]+(?P<off>\d+)(?:\s+for\s+partition\s+(?P<part>[\w.\-]+))?|(?P<topic>[\w.\-]+-\d+)@(?P<off2>\d+)",
    re.I,
)
# An exception class named in a message; the network/database ones (timeouts, refusals) are claimed elsewhere.
EXCEPTION = re.compile(
    # ("NoError", a status meaning that nothing failed, is no exception)
    r"\b(?!No(?:Error|Exception)\b)((?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Exception|Error))\b(?!\s+(?:rate|count|budget)|[\"']\s*:)|"
    r"\bpanic: |\bpanicked at\b|called `(?:Option|Result)::(?:unwrap|expect)\(\)` on|"
    r"\bnil pointer dereference|\bSIGSEGV\b|\bsegmentation fault|\bUnhandled(?: promise)? rejection|"
    r"\bunhandled exception|\buncaught exception|\bTraceback \(most recent call last\)|\bassertion failed|"
    r"Cannot read propert(?:y|ies) of (?:undefined|null)|is not a function|index out of range|"
    # PHP's fatal errors: a method or function the code calls that does not exist (a rename half done)
    r"Call to (?:undefined|private|protected) (?:method|function) [\w\\:]+\(\)|"
    r"Call to a member function \w+\(\) on (?:null|bool|array|string|int)|"
    r"Java-level deadlock|all goroutines are asleep - deadlock|thread-pool starvation deadlock|"
    r"lock-ordering deadlock|goroutine pile-up on a lock|infinite loop: \d+ RUNNABLE threads spin",
    re.I,
)
# Exceptions a client raises when the other side failed (the server answered 5xx, refused, timed out): the
# dependency failed; the error count stays this service's `errors` symptom.
REMOTE_FAILURE = re.compile(
    r"\b\w*(?:Transport|Connection|Connect|Timeout|Unavailable|Remote|Rpc|Grpc|Http|Network|Socket|Upstream|Gateway|"
    r"ServiceUnavailable|Throttl|Disconnect)\w*(?:Error|Exception)\b|"
    # Python DB-API's OperationalError: the database failed the operation (connection lost, server gone, disk)
    r"\bOperationalError\b|\(5\d\d\b|\b(?:status|code)[=: ]+5\d\d\b|\b50[234]\b|"
    # a datastore's own failure, as its client library relays it: shards missing, a cluster down or read-only,
    # no leader or primary to talk to
    # an identity or metadata endpoint that did not give its document (Microsoft.IdentityModel's IDX20803/IDX20804:
    # the OpenID configuration or its signing keys could not be fetched)
    r"\bIDX2080[347]\b|Unable to (?:obtain|retrieve|fetch|download) (?:configuration|document|metadata|JWKS|keys) "
    r"from\b|"
    # a distributed job's peer that went away (NCCL: another rank exited or its network failed): that peer's
    # failure, not this rank's code
    r"\bncclRemoteError\b|remote process exit(?:ed|ing)|"
    r"search_phase_execution_exception|all shards failed|missing shards|no_shard_available|cluster_block_exception|"
    r"\bCLUSTERDOWN\b|\bNOREPLICAS\b|\bMASTERDOWN\b|LOADING Redis is loading|READONLY You can't write|"
    r"NotWritablePrimary|not master and slaveOk|No primary (?:server )?available|LEADER_NOT_AVAILABLE|"
    r"NotLeaderOrFollower|NOT_ENOUGH_REPLICAS|the database system is (?:starting up|shutting down|in recovery)|"
    # the server went away under the client (a restart, a failover): ZooKeeper's, Kafka's, any stream client's
    r"EndOfStreamException|server has closed (?:the )?(?:socket|connection)|"
    # a peer's connection ending mid-read (a socket or RPC stream, not a truncated file)
    r"EOFException\b[\s\S]{0,300}?(?:SocketInputStream|DataInputStream\.read|jute|netty|Channel|Socket)|"
    r"connection (?:closed|reset) by (?:peer|remote|server)|"
    # a client that tried every host of its server and reached none (Algolia's, Elasticsearch's, any SDK's)
    r"\bUnreachable hosts?\b|\b(?:all|no) (?:hosts?|nodes?) (?:were |are )?(?:reachable|unreachable|available)\b|"
    r"\b(?:ETIMEDOUT|ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ENETUNREACH)\b|"
    # Confluent Schema Registry's own failures (50001 store error, 50002 timeout, 50003 forwarding to the leader,
    # 50004 no leader): the registry failed, not the schema
    r"error code: 5000[1-4]\b|\berror_code\W{1,3}5000[1-4]\b|Error while forwarding \w+(?: \w+){0,3} to the leader",
)
# a consumer refusing an input record it cannot use, logged at warning level but failing that record all the same
REJECTED_INPUT = re.compile(
    r"\b(?:reject(?:ing|ed)?|dead[- ]letter(?:ing|ed)?|DLQ|skipp(?:ing|ed) (?:invalid|bad|malformed)|"
    r"discard(?:ing|ed)|quarantin(?:ing|ed))\b",
    re.I,
)
_CAUSED_BY = re.compile(r"Caused by: ((?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Exception|Error))")
APP_OOM = re.compile(
    # (not "unable to create native thread": the process or thread limit, not memory)
    r"java\.lang\.OutOfMemoryError(?!: unable to create (?:new )?native thread)|JavaScript heap out of memory|"
    r"\bMemoryError\b|fatal error: runtime: out of memory|"
    r"Cannot allocate memory|std::bad_alloc|"
    # a server's own fixed memory pool full: Kamailio/OpenSIPS shared and private memory ("out of shm memory", "no
    # more shm mem", "no more pkg memory")
    r"\bout of (?:shm|pkg|shared) memory\b|\bno more (?:shm|pkg) mem(?:ory)?\b|"
    # serverless platforms killing an instance at its memory limit (Cloud Run, App Engine, Cloud Functions)
    r"Memory limit of \d+ ?MiB exceeded with \d+ ?MiB used|"
    # and the PaaS platforms' words for it: Render, Heroku (R15 kills; R14 only swaps)
    r"Ran out of memory \(used over \d+ ?[MG]i?B\)|Error R15 \(Memory quota vastly exceeded\)",
)


# A service's own workers or threads all busy, or a consumer too slow for its group: a capacity it set ran out.
# Servers log these at WARN as often as at ERROR, so every record is read.
APP_CAPACITY = re.compile(
    r"(?P<pool>RejectedExecutionException|rejected from (?:java\.util\.concurrent\.)?\w*ThreadPoolExecutor|"
    r"All threads \(\d+\) are currently busy|Thread pool (?:is )?(?:exhausted|saturated)|"
    r"server reached (?:pm\.)?max_children setting|WORKER TIMEOUT \(pid|listen queue of socket \S+ full|"
    r"worker_connections are not enough|max(?:imum)? (?:number of )?(?:worker|thread)s? reached|"
    r"MaxRequestWorkers|ServerLimit)|"
    r"(?P<poll>max\.poll\.interval\.ms|consumer poll timeout has expired|CommitFailedException|"
    r"the group has already rebalanced)|"
    # a DHCP server with no address left to lease (Kea's allocation engine, ISC dhcpd)
    r"(?P<lease>ALLOC_ENGINE_V[46]_ALLOC_FAIL|failed to allocate an IPv[46] (?:address|lease)|no free leases|"
    r"(?:address|lease|DHCP) pool (?:is )?(?:exhausted|depleted)|DHCPSRV_\w*POOL_EXHAUSTED)",
)
CAPACITY_MIN = 3


# a caller that gave up after its retries: what failed is in the tries, not in this line
RETRIES_SPENT = re.compile(
    r"after \d+ (?:attempts|retries|tries)|retries (?:exhausted|exceeded)|max(?:imum)? (?:retries|attempts) "
    r"(?:reached|exceeded)",
    re.I,
)
