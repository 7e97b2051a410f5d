"""The ``deltaflow`` command: dispatches to the API contract (``crd``), the operator
(``operator``) and the data plane (``run``, ``stream``, ``optimize``, ``vacuum``,
``recover-checkpoint``), importing each only when its command runs."""
