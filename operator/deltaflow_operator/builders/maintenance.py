"""CronJobs for OPTIMIZE and VACUUM: each runs ``deltaflow <job>`` in Spark local mode."""

from __future__ import annotations

from typing import Literal

from deltaflow_api import DeltaIngestion
from deltaflow_api.driver_pod import CONFIG_MOUNT
from deltaflow_operator.builders.common import (
    Manifest,
    cronjob_name,
    labels,
    metadata,
    pod_annotations,
    pod_labels,
    pod_placement,
    restricted_container_security,
    restricted_pod_security,
    runtime_image,
)
from deltaflow_operator.builders.driver import (
    config_volume,
    container_resources,
    data_volume_mounts,
    data_volumes,
    secret_env,
)
from deltaflow_operator.settings import Settings

Job = Literal["optimize", "vacuum"]
JOBS: tuple[Job, ...] = ("optimize", "vacuum")


def maintenance_cronjob(ingestion: DeltaIngestion, settings: Settings, job: Job) -> Manifest:
    """The CronJob for one maintenance job; suspended while the stream is suspended or disabled."""
    spec = ingestion.spec
    schedule = spec.maintenance.optimize if job == "optimize" else spec.maintenance.vacuum
    component = f"maintenance-{job}"
    options = spec.driver.pod  # maintenance jobs run where the driver may
    job_pod_labels = pod_labels(ingestion, component, options)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata(ingestion, cronjob_name(ingestion.name, job), component),
        "spec": {
            "schedule": schedule.schedule,
            "timeZone": "Etc/UTC",
            "suspend": spec.suspend or not schedule.enabled,
            "concurrencyPolicy": "Forbid",  # never two OPTIMIZE (or VACUUM) runs at once
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels(ingestion, component)},
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": 6 * 3600,
                    "ttlSecondsAfterFinished": 24 * 3600,
                    "template": {
                        "metadata": {
                            "labels": job_pod_labels,
                            "annotations": pod_annotations(options),
                        },
                        "spec": {
                            **pod_placement(ingestion, options),
                            "restartPolicy": "Never",
                            "automountServiceAccountToken": False,  # needs no API access
                            "enableServiceLinks": False,
                            "securityContext": restricted_pod_security(),
                            "containers": [
                                {
                                    "name": job,
                                    "image": runtime_image(ingestion, settings.image),
                                    "imagePullPolicy": settings.image_pull_policy,
                                    "args": [job, "--config", f"{CONFIG_MOUNT}/ingestion.yaml"],
                                    "env": [
                                        {"name": "HOME", "value": "/tmp"},
                                        *secret_env(ingestion),
                                    ],
                                    "resources": container_resources(spec.driver),
                                    "securityContext": restricted_container_security(),
                                    "volumeMounts": [
                                        {
                                            "name": "config",
                                            "mountPath": CONFIG_MOUNT,
                                            "readOnly": True,
                                        },
                                        {"name": "tmp", "mountPath": "/tmp"},
                                        *data_volume_mounts(ingestion),
                                    ],
                                }
                            ],
                            "volumes": [
                                config_volume(ingestion),
                                {"name": "tmp", "emptyDir": {}},
                                *data_volumes(ingestion),
                            ],
                        },
                    },
                },
            },
        },
    }
