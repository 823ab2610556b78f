"""Changes: a rollout that kept every image and changed only settings is a configuration change, and the errors
that begin after it on that workload are its effect, not a code defect."""

from __future__ import annotations

import time
from typing import Any

from diagnosis.analyzers.changes import kubernetes_rollouts_changes
from diagnosis.investigate import investigate
from tests.unit._evidence_builders import T0, Builder, assert_refs_real, causes


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _rs(name: str, revision: int, created: float, image: str, profile: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "creationTimestamp": _iso(created),
            "annotations": {"deployment.kubernetes.io/revision": str(revision)},
            "ownerReferences": [{"kind": "Deployment", "name": "checkout"}],
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "app", "image": image, "env": [{"name": "APP_PROFILE", "value": profile}]}]
                }
            }
        },
    }


def _bundle(new_image: str) -> Builder:
    b = Builder()
    b.raw(
        "k8s/ReplicaSet",
        "ReplicaSet/shop/checkout-7b9c8d6f5",
        _rs("checkout-7b9c8d6f5", 41, T0 - 86400, "c:7.4", "prod"),
    )
    b.raw("k8s/ReplicaSet", "ReplicaSet/shop/checkout-5d4c3b2f7", _rs("checkout-5d4c3b2f7", 42, T0, new_image, "dev"))
    msg = "ERROR c.a.checkout.PaymentService : charge failed: PaymentDeclinedException: card_not_test_card"
    b.log("Pod/shop/checkout-5d4c3b2f7-8xk2d", [(T0 + 30 + i * 10, "error", msg) for i in range(30)])
    return b


def test_a_settings_only_rollout_is_a_configuration_change_naming_the_setting() -> None:
    ev = _bundle("c:7.4").set()
    found = kubernetes_rollouts_changes(ev)
    [cause] = causes(found)
    assert cause.code == "config_change" and cause.category == "configuration_error"
    assert "APP_PROFILE: prod -> dev" in cause.mechanism
    assert_refs_real(ev, found)
    d = investigate(ev)
    assert d.category == "configuration_error" and "APP_PROFILE" in d.root_cause


def test_a_new_image_stays_a_deploy() -> None:
    [cause] = causes(kubernetes_rollouts_changes(_bundle("c:7.5").set()))
    assert cause.code == "recent_deploy"
