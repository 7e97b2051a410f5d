"""The names of a DeltaIngestion's children, and the longest ``metadata.name`` they all fit.

Each child's name is the resource's name plus a fixed suffix; each kind has its own limit. The
admission rule on ``metadata.name`` is derived from this table, so a name the API server accepts
always yields children the API server (and Spark) accept too.
"""

from __future__ import annotations

from dataclasses import dataclass

DNS_LABEL = 63  # Services, and pod names (the pod's hostname)
DNS_SUBDOMAIN = 253  # ServiceAccounts, Roles, RoleBindings, ConfigMaps
CRONJOB = 52  # the CronJob controller appends "-<minutes since epoch>" to name its Jobs
# Spark names executor pods "<prefix>-exec-<id>" and refuses a prefix longer than 47 (63 minus
# "-exec-" minus the 10 digits of the largest executor id).
SPARK_EXECUTOR_PREFIX = 47


@dataclass(frozen=True)
class ChildName:
    """One derived name: what it names, the suffix it adds and the limit of its kind."""

    names: str
    suffix: str
    limit: int

    def of(self, name: str) -> str:
        """The child's name for the DeltaIngestion ``name``."""
        return f"{name}{self.suffix}"


DRIVER_POD = ChildName("driver pod", "-driver", DNS_LABEL)
DRIVER_SERVICE = ChildName("driver Service", "-driver", DNS_LABEL)
# A suffix no other application's ServiceAccount ends in: the chart's admission policy knows a
# driver by it (system:serviceaccount:<namespace>:<name>-deltaflow-driver).
DRIVER_IDENTITY = ChildName(
    "driver ServiceAccount and RoleBinding", "-deltaflow-driver", DNS_SUBDOMAIN
)
# What earlier operators named it: a newer one's first apply deletes that RoleBinding, so the
# old identity keeps no rights (the ServiceAccount itself goes with the DeltaIngestion).
LEGACY_DRIVER_IDENTITY_SUFFIX = "-spark"
CONFIG_MAP = ChildName("pipeline ConfigMap", "-config", DNS_SUBDOMAIN)
SPARK_AUTH_SECRET = ChildName("Spark authentication Secret", "-spark-auth", DNS_SUBDOMAIN)
OPTIMIZE_CRONJOB = ChildName("OPTIMIZE CronJob", "-optimize", CRONJOB)
VACUUM_CRONJOB = ChildName("VACUUM CronJob", "-vacuum", CRONJOB)
EXECUTOR_PREFIX = ChildName("executor pod name prefix", "", SPARK_EXECUTOR_PREFIX)

CHILD_NAMES = (
    DRIVER_POD,
    DRIVER_SERVICE,
    DRIVER_IDENTITY,
    CONFIG_MAP,
    SPARK_AUTH_SECRET,
    OPTIMIZE_CRONJOB,
    VACUUM_CRONJOB,
    EXECUTOR_PREFIX,
)


def longest_name() -> tuple[int, ChildName]:
    """The longest ``metadata.name`` every child name fits, and the child that sets it."""
    tightest = min(CHILD_NAMES, key=lambda c: c.limit - len(c.suffix))
    return tightest.limit - len(tightest.suffix), tightest


MAX_NAME_LENGTH, NAME_LIMITED_BY = longest_name()


def executor_pod_name(name: str, executor_id: int) -> str:
    """The name Spark gives executor ``executor_id`` of the stream ``name``."""
    return f"{EXECUTOR_PREFIX.of(name)}-exec-{executor_id}"
