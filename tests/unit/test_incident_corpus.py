"""The dev split of the incident corpus as a regression guard: the rules, the formats and the reasoning together.

Only the dev split: the test split is never run by a test (a failing test invites a fix, and a fix tuned on the
held-out split would make its figure a lie); bench/investigations.py measures it.
"""

from __future__ import annotations

import os
from pathlib import Path

from diagnosis.evaluation import evaluate

DEV = Path(__file__).resolve().parent.parent / "data" / "incidents" / "dev"


def test_the_dev_split_is_diagnosed_right_without_a_forbidden_category() -> None:
    from services.cli import _investigate_bundle  # the path `opsgraph investigate` takes

    report = evaluate(DEV, _investigate_bundle, workers=os.cpu_count() or 1)
    overall = report["overall"]
    wrong = [(r["name"], r["expected"], r["got"]) for r in report["results"] if not r["passed"]]
    assert overall["scenarios"] >= 1624
    assert overall["errors"] == 0, [r for r in report["results"] if r["error"]]
    # an analyzer that raises costs only its own findings, so its bug would read as "the rule did not apply"
    assert overall["analyzer_failures"] == 0, [
        (r["name"], r["analyzer_failures"]) for r in report["results"] if r["analyzer_failures"]
    ]
    # the floor is where the rules stand (1389/1624, keyword recall 0.558, sixty-one forbidden categories: dev10-08, a
    # join bug read as its memory kills; dev22-07, a file delivered twice under a new name that nothing in the logs
    # flags; dev24-07, a TLS-only Redis port read from an unread `az redis show`; dev29-07, a GTFS feed's missing
    # calendar read as an unrelated OOM kill; dev30-03 and dev30-12, release bugs (keys without a TTL, retries without
    # backoff) read as the capacity they use up; dev32-04, a dbt join on a non-unique key read as the data test it
    # fails; dev32-12, a leak with no release record in sight read as its OOM kills; dev33-04, a thread leak with no
    # release record read as the thread limit; dev34-03, an Aurora max_connections set by a Terraform parameter block
    # read as the pool it empties; dev34-15, a bad row of an IP reputation feed read as the 403s it causes; dev35-16, a
    # database's WAL write error on a volume nothing else covers, read as recovered; dev37-07, a supplier's new column
    # read as an S3 mount's brief failures; dev37-13, a client made per request read as the heap it fills; dev38-23, our
    # own webhook's panic read as the timeouts its callers see; dev39-14, a rate limiter keyed on the load balancer's
    # address read as throttling; dev40-15, a partner's renamed field behind an egress allow-list read as the allow-
    # list; dev40-23, a partner's amounts in the wrong unit read as the Lambda that rejects them; dev41-03, an S3
    # lifecycle rule expiring backups read as healthy; dev41-04, a solver release's leak on HPC nodes read as the memory
    # limit; dev42-11, a converter dropped by a commit read as the bad records it produces; dev42-12, a dbt model's
    # unique key read as the data test it fails; dev42-20, an app release refreshing tokens every few seconds read as
    # the rate limiter it trips; dev44-04, a Squid helper release that leaks read as its OOM kills; dev44-19, a tenant's
    # rate limit set too low in a ConfigMap read as throttling; dev47-20, a gateway plugin's bug read as the upstream it
    # fails; and twelve of stop 32's blind batches, not tuned on: dev52-01, a blue-green release paused by design;
    # dev52-03, a flag's timeout cut read as the provider it cuts off; dev54-03, an ILM rollover alias dropped read as
    # the disk it fills; dev54-07, seconds read as milliseconds read as a setting; dev55-02, a CNI IP pool full read as
    # the sandbox errors; dev57-03, an SPN on the wrong account read as Kerberos failing; dev58-05, KEDA's metrics
    # backend down read as the HPA it starves; dev61-03, a renamed Helm key read as vLLM's crash; dev61-07, a feature in
    # milliseconds read as the scoring code; dev62-08, a Service seen only from its caller read as another workload's
    # rollout; and ten of stop 33's blind batches, not tuned on: dev64-02, a Flink state leak read as a few skipped
    # events; dev66-03, a release's chunked response with a Content-Length read as the gateway's 502s; dev69-07, a file
    # loaded twice under a new name read as healthy; dev70-04, signing keys cached at start-up read as their rotation;
    # dev71-07, a feed of duplicated rows read as the heap it fills; dev73-01, a planned rolling deploy read as one
    # signature error; dev73-04, a promo-code bug read as another service's timeouts; dev73-06, an EC2 host failed under
    # a StatefulSet read as Redis failing; and three of stop 34's blind batches, not tuned on: dev81-05, another team's
    # Ceph gateway answering SlowDown read as our request rate; dev81-06, an InfiniBand optic flapping on one node read
    # as NCCL's exceptions; dev85-05, another team's RabbitMQ disk alarm read as our capacity; and nine of stop 35's
    # blind batches, not tuned on: dev89-04, abandoned multipart uploads filling a quota read as the quota; dev91-03, a
    # VCL TTL on live playlists read as a QoE export's errors; dev91-04, ffmpeg blocked on an unread pipe read as the
    # autoscaler at its maximum; dev93-06, a client's NIC flapping read as its NFS server; dev95-03, a D1 binding
    # missing from wrangler.toml read as the TypeError it causes; dev97-01, a class's burst of spawns the autoscaler
    # absorbed read as pending pods; dev98-04, a release's decimal format read as the XSD it fails; dev99-07, a
    # withdrawn CVE blocking pulls read as old 401s; dev100-08, a service seen only from its callers read as one
    # customer's revoked token; and five of stop 36's blind batches, not tuned on: dev103-04, a snapshot tool's
    # retention bug keeping the oldest snapshots read as healthy; dev105-07, a NetBox export with a duplicated address
    # read as the DNS name it leaves out; dev105-08, a CloudFormation handler's bare InternalFailure read as another
    # principal's throttled reads; dev110-04, a Drupal module's recursion read as its OOM kills; dev114-04, a sync
    # release that never advances its cursor read as the export rate limit it uses up). Before any rule saw them the
    # dev4-* scenarios went in at 14/24, the dev5-* at 6/12, the dev6-* at 13/24, the dev7-* at 8/24, the dev8-* at
    # 8/16, the dev9-* at 13/24, the dev10-* at 8/24, the dev11-* at 6/24, the dev12-* at 12/24, the dev13-* at 8/24,
    # the dev14-* at 13/24, the dev15-* at 12/24, the dev16-* at 9/24, the dev17-* at 17/24, the dev18-* at 8/24, the
    # dev19-* at 5/16, the dev20-* at 10/16, the dev21-* at 6/16, the dev22-* at 3/8, the dev23-* at 11/24, the dev24-*
    # at 10/24, the dev25-* at 11/24, the dev26-* at 8/16, the dev27-* at 7/16, the dev28-* at 12/24, the dev29-* at
    # 6/16, the dev30-* at 8/16, the dev31-* at 17/24, the dev32-* at 11/24, the dev33-* at 10/24, the dev34-* at 11/16,
    # the dev35-* at 16/24, the dev36-* at 19/24, the dev37-* at 15/24, the dev38-* at 17/24, the dev39-* at 11/24, the
    # dev40-* at 13/24, the dev41-* at 12/24, the dev42-* at 14/24, the dev43-* at 17/24, the dev44-* at 13/24, the
    # dev45-* at 11/24, the dev46-* at 17/24, the dev47-* at 15/24, the dev48-* to dev62-* (8 each) at 4, 6, 8, 5, 3, 5,
    # 4, 2, 6, 4, 5, 4, 4, 4 and 6 of 8 and the dev63-* to dev73-* at 4, 4, 3, 4, 1, 6, 5, 4, 5, 6 and 4 of 8 and the
    # dev74-* to dev87-* at 6, 5, 5, 7, 7, 4, 5, 2, 2, 6, 5, 5, 4 and 6 of 8 and the dev88-* to dev101-* at 4, 5, 6, 5,
    # 4, 3, 5, 4, 6, 3, 4, 4, 5 and 4 of 8 and the dev102-* to dev116-* at 5, 3, 5, 4, 3, 5, 6, 4, 4, 6, 7, 4, 4, 6 and
    # 7 of 8 (their keywords are harder: recall fell from 0.716 as they came in, and accuracy from 0.953 as the later
    # batches came in at about half): like the held-out split (bench/investigations.py), they say the rules do not
    # generalise as well as dev suggests. A change that loses ground fails here.
    assert overall["forbidden"] <= 61, wrong
    assert overall["accuracy"] >= 0.855, wrong
    assert overall["keyword_recall"] >= 0.558
