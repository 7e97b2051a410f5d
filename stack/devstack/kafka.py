"""A single-node Kafka broker in KRaft mode (broker + controller in one JVM).

Its PLAINTEXT listener (loopback), the controller's and the pods' (PLAINTEXT, on the pod network's
gateway) authenticate nobody: their principal, User:ANONYMOUS, is a super user, so tests that do
not care about security use them as before. Three more listeners make clients prove who they
are, on the gateway when there is one (pods and host processes both reach it), else on loopback:

- ``MTLS`` (SSL with a required client certificate; principal = the certificate's CN),
- ``SASLSSL`` (SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, and OAUTHBEARER validated against
  devstack.token_issuer's JWKS),
- ``SASLPLAIN`` (SASL_PLAINTEXT: SCRAM-SHA-512).

Kafka's StandardAuthorizer is on, with no ACL meaning no access for everyone but super users;
:meth:`KafkaBroker.grant` and :meth:`KafkaBroker.add_scram_user` set ACLs and SCRAM credentials.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.install import installed_path
from devstack.pki import KafkaPki, kafka_pki_paths, make_kafka_pki
from devstack.process import Service, ServiceError, free_port, tcp_open
from devstack.token_issuer import (
    TokenIssuer,
    issuer_url_of,
    jwks_url_of,
    start_issuer,
    wait_issuer,
)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


SUPER_USERS = ("User:ANONYMOUS", "User:admin")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Users of the SASLSSL listener's PLAIN mechanism (fixed in its JAAS config; passwords per run).
PLAIN_USERS = ("admin", "stream-plain")
_OAUTH = "org.apache.kafka.common.security.oauthbearer"
_VALIDATOR_HANDLER = f"{_OAUTH}.OAuthBearerValidatorCallbackHandler"
_JWT_VALIDATOR = f"{_OAUTH}.BrokerJwtValidator"


@dataclass
class KafkaBroker:
    """A running broker: its listeners' addresses, credentials material and the supervised
    processes (the broker and its token issuer)."""

    bootstrap_servers: str  # PLAINTEXT on loopback (super user)
    service: Service
    mtls_bootstrap: str  # SSL, client certificate required
    sasl_ssl_bootstrap: str  # SASL_SSL: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER
    sasl_plaintext_bootstrap: str  # SASL_PLAINTEXT: SCRAM-SHA-512
    pki: KafkaPki
    issuer: TokenIssuer
    plain_users: Mapping[str, str]  # PLAIN user -> password (SASLSSL listener)
    # The listener pods use (on the pod network's gateway); None without a pod network.
    pod_bootstrap_servers: str | None = None
    _admin: Any = field(default=None, repr=False, compare=False)

    @property
    def ca_file(self) -> Path:
        """The CA that signed the broker's (and the issuer's) certificate."""
        return self.pki.ca_file

    def stop(self) -> None:
        """Stop the broker and its token issuer (the data directory goes with the run's temp
        dir)."""
        self._admin = None
        self.service.stop()
        self.issuer.stop()

    def consumer_groups(self, *args: str) -> str:
        """Run Kafka's standard ``kafka-consumer-groups`` tool against this broker; its stdout."""
        tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
        done = subprocess.run(
            ["java", "-Xmx256m", "-cp", f"{installed_path('kafka')}/*", tool,
             "--bootstrap-server", self.bootstrap_servers, *args],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise ServiceError(f"kafka-consumer-groups {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def restart(self, timeout: float = 90.0) -> None:
        """Stop the broker and start it again on the same ports and data (a broker restart);
        the token issuer keeps running."""
        self.service.stop()
        self.service.start()
        self.service.wait_ready(lambda: _answers_metadata(self.bootstrap_servers), timeout)

    def admin(self) -> Any:
        """A confluent-kafka AdminClient on the PLAINTEXT listener (a super user)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            # log_level 0: it lives as long as the broker object, through restarts and past
            # stop(), where librdkafka would log every refused reconnect. Calls still raise.
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        return self._admin

    def add_scram_user(
        self, name: str, mechanism: str, password: str, timeout: float = 30.0
    ) -> None:
        """Create (or reset) ``name``'s SCRAM credential; return once the broker holds it."""
        # (confluent-kafka re-exports these without marking them for mypy)
        from confluent_kafka.admin._scram import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"mechanism must be one of {SCRAM_MECHANISMS}, not {mechanism!r}")
        scram = ScramMechanism[mechanism.replace("-", "_")]
        upsert = UserScramCredentialUpsertion(
            name, ScramCredentialInfo(scram, 4096), password.encode()
        )
        admin = self.admin()
        admin.alter_user_scram_credentials([upsert])[name].result(timeout=timeout)

        def held() -> bool:
            from confluent_kafka import KafkaError, KafkaException

            try:
                found = admin.describe_user_scram_credentials([name])[name].result(timeout=timeout)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:  # not applied yet
                    return False
                raise
            return any(info.mechanism == scram for info in found.scram_credential_infos)

        _until(held, timeout, f"SCRAM credential of {name}")

    def grant(
        self,
        principal: str,
        *,
        topic: str | None = None,
        topic_prefix: str | None = None,
        group: str | None = None,
        group_prefix: str | None = None,
        operations: Sequence[str] = ("READ", "DESCRIBE"),
        timeout: float = 30.0,
    ) -> None:
        """Allow ``principal`` (``User:name``, or just the name) ``operations`` on each resource
        given; return once the broker's authorizer holds the ACLs."""
        bindings = _bindings(
            principal,
            topic=topic,
            topic_prefix=topic_prefix,
            group=group,
            group_prefix=group_prefix,
            operations=operations,
        )
        admin = self.admin()
        for future in admin.create_acls(bindings).values():
            future.result(timeout=timeout)
        for binding in bindings:
            _until(_acl_held(admin, binding, timeout), timeout, f"ACL {binding}")

    def revoke(
        self,
        principal: str,
        *,
        topic: str | None = None,
        topic_prefix: str | None = None,
        group: str | None = None,
        group_prefix: str | None = None,
        operations: Sequence[str] = ("READ", "DESCRIBE"),
        timeout: float = 30.0,
    ) -> None:
        """Remove the ACLs :meth:`grant` made with the same arguments; return once gone."""
        from confluent_kafka.admin._acl import AclBindingFilter

        bindings = _bindings(
            principal,
            topic=topic,
            topic_prefix=topic_prefix,
            group=group,
            group_prefix=group_prefix,
            operations=operations,
        )
        filters = [AclBindingFilter(*_binding_args(b)) for b in bindings]
        admin = self.admin()
        for future in admin.delete_acls(filters).values():
            future.result(timeout=timeout)
        for binding in bindings:
            _until(_acl_held(admin, binding, timeout, gone=True), timeout, f"{binding} removed")


def _bindings(
    principal: str,
    *,
    topic: str | None,
    topic_prefix: str | None,
    group: str | None,
    group_prefix: str | None,
    operations: Sequence[str],
) -> list[Any]:
    from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
    from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

    if ":" not in principal:
        principal = f"User:{principal}"
    resources = [
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL),
        (ResourceType.TOPIC, topic_prefix, ResourcePatternType.PREFIXED),
        (ResourceType.GROUP, group, ResourcePatternType.LITERAL),
        (ResourceType.GROUP, group_prefix, ResourcePatternType.PREFIXED),
    ]
    named = [(kind, name, pattern) for kind, name, pattern in resources if name is not None]
    if not named or not operations:
        raise ValueError("name at least one topic or group resource and one operation")
    return [
        AclBinding(kind, name, pattern, principal, "*", AclOperation[op.upper()],
                   AclPermissionType.ALLOW)
        for kind, name, pattern in named
        for op in operations
    ]  # fmt: skip


def _acl_held(
    admin: Any, binding: Any, timeout: float, *, gone: bool = False
) -> Callable[[], bool]:
    """A check: whether the broker's authorizer lists ``binding`` (or, ``gone``, no longer
    does). DescribeAcls reads the broker's own copy of the metadata: what it lists it enforces."""
    from confluent_kafka.admin._acl import AclBindingFilter

    exact = AclBindingFilter(*_binding_args(binding))
    return lambda: bool(admin.describe_acls(exact).result(timeout=timeout)) != gone


def _binding_args(binding: Any) -> tuple[Any, ...]:
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` until true: the broker applies metadata changes (ACLs, SCRAM credentials)
    a moment after the controller acknowledged them."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ServiceError(f"the broker did not apply the {what} within {timeout:.0f}s")
        time.sleep(0.05)


@dataclass(frozen=True)
class _Ports:
    plaintext: int
    controller: int
    mtls: int
    sasl_ssl: int
    sasl_plaintext: int


def _jaas(module: str, options: Mapping[str, str] | None = None) -> str:
    opts = "".join(f' {k}="{v}"' for k, v in (options or {}).items())
    return f"{module} required{opts};"


def _server_properties(
    data_dir: Path,
    *,
    ports: _Ports,
    host: str,
    pod_listener: str | None,
    pki: KafkaPki,
    plain_users: Mapping[str, str],
    issuer: str,
    jwks_url: str,
) -> str:
    secure = {
        "MTLS": f"{host}:{ports.mtls}",
        "SASLSSL": f"{host}:{ports.sasl_ssl}",
        "SASLPLAIN": f"{host}:{ports.sasl_plaintext}",
    }
    listeners = [f"PLAINTEXT://127.0.0.1:{ports.plaintext}"]
    protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    if pod_listener is not None:
        # A listener for pods: each client is told the address of the listener it used.
        listeners.append(f"PODS://{pod_listener}")
        protocols.append("PODS:PLAINTEXT")
    listeners += [f"{name}://{address}" for name, address in secure.items()]
    protocols += ["MTLS:SSL", "SASLSSL:SASL_SSL", "SASLPLAIN:SASL_PLAINTEXT"]
    advertised = ",".join(listeners)  # each bound address is reachable as it is
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    oauth = "listener.name.saslssl.oauthbearer."
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{ports.controller}",
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{ports.controller}"]),
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(data_dir / "log"),
        "num.partitions": "1",
        # One node: every internal topic must fit on it.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Tests that exercise retention delete segments quickly.
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "0",
        # ACLs: the unauthenticated listeners' User:ANONYMOUS (PLAINTEXT, pods, controller) is a
        # super user; any other principal gets only what an ACL allows.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": ";".join(SUPER_USERS),
        "allow.everyone.if.no.acl.found": "false",
        # TLS (MTLS and SASLSSL): PEM files; the keystore file holds the key, then the cert.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_file),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
        "listener.name.mtls.ssl.client.auth": "required",
        # SASLSSL: PLAIN (fixed users), SCRAM (users from add_scram_user), OAUTHBEARER.
        "listener.name.saslssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,"
        "OAUTHBEARER",
        "listener.name.saslssl.plain.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            {f"user_{name}": password for name, password in plain_users.items()},
        ),
        "listener.name.saslssl.scram-sha-256.sasl.jaas.config": _jaas(scram),
        "listener.name.saslssl.scram-sha-512.sasl.jaas.config": _jaas(scram),
        f"{oauth}sasl.jaas.config": _jaas(f"{_OAUTH}.OAuthBearerLoginModule"),
        f"{oauth}sasl.server.callback.handler.class": _VALIDATOR_HANDLER,
        # Named, not left to the default: in Kafka 4.1.1 the handler makes DefaultJwtValidator
        # without a key resolver, and that delegates to ClientJwtValidator, which checks no
        # signature (a token signed by any key was accepted). The handler reads this one key
        # without the mechanism prefix, so it takes the listener prefix alone.
        "listener.name.saslssl.sasl.oauthbearer.jwt.validator.class": _JWT_VALIDATOR,
        f"{oauth}sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        f"{oauth}sasl.oauthbearer.expected.audience": "kafka",
        f"{oauth}sasl.oauthbearer.expected.issuer": issuer,
        # Sessions end after a minute unless the client re-authenticates: token refresh is
        # exercised by every OAUTHBEARER stream that runs longer.
        f"{oauth}connections.max.reauth.ms": "60000",
        # SASLPLAIN: SCRAM-SHA-512 without TLS.
        "listener.name.saslplain.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.saslplain.scram-sha-512.sasl.jaas.config": _jaas(scram),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _answers_metadata(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.rsplit(":", 1)
    if not tcp_open(host, int(port)):
        return False
    # log_level 0: a probe client must not fill the console with retries once we stop.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return len(admin.list_topics(timeout=2).brokers) == 1


def _write_private(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)  # holds passwords (PLAIN users' JAAS)
    path.write_text(text)


def start_kafka(
    work_dir: Path, pod_address: str | None = None, timeout: float = 90.0
) -> KafkaBroker:
    """Make the PKI, start the token issuer, format storage and start a KRaft broker; return
    once the broker answers metadata requests.

    With ``pod_address`` (the pod network's gateway) the broker also listens there for pods, and
    its security listeners and the issuer bind there rather than on loopback.
    """
    libs = installed_path("kafka")
    work_dir.mkdir(parents=True, exist_ok=True)
    host = pod_address or "127.0.0.1"
    ports = _Ports(free_port(), free_port(), free_port(), free_port(), free_port())
    pod_listener = f"{pod_address}:{free_port()}" if pod_address else None
    issuer_ports = (free_port(), free_port())
    plain_users = {name: secrets.token_urlsafe(18) for name in PLAIN_USERS}
    pki = kafka_pki_paths(work_dir / "pki")
    jwks_url = jwks_url_of(issuer_ports[1])

    config = work_dir / "server.properties"
    _write_private(
        config,
        _server_properties(
            work_dir,
            ports=ports,
            host=host,
            pod_listener=pod_listener,
            pki=pki,
            plain_users=plain_users,
            issuer=issuer_url_of(host, issuer_ports[0]),
            jwks_url=jwks_url,
        ),
    )
    (work_dir / "log4j2.properties").write_text(_LOG4J2)
    java = [
        "java",
        "-Xms256m",
        "-Xmx768m",
        f"-Dlog4j2.configurationFile={work_dir / 'log4j2.properties'}",
        # Kafka 4 fetches no OAuth URL it is not allowed to (none by default).
        f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks_url}",
        "-cp",
        f"{libs}/*",
    ]
    # Formatting (a JVM of its own) reads no certificate: it runs while the keys are made, and
    # while the issuer starts (the broker fetches the issuer's JWKS as it starts).
    fmt_argv = [*java, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(config)]
    fmt = subprocess.Popen(fmt_argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        make_kafka_pki(pki.dir, host)
        issuer = start_issuer(
            work_dir / "issuer",
            host,
            ca_file=pki.ca_file,
            cert=pki.issuer_cert,
            key=pki.issuer_key,
            ports=issuer_ports,
        )
    except BaseException:
        fmt.kill()
        fmt.wait()
        raise
    fmt_out, _ = fmt.communicate()
    if fmt.returncode != 0:
        issuer.stop()
        raise ServiceError(f"kafka storage format failed:\n{fmt_out}")

    service = Service("kafka", [*java, "kafka.Kafka", str(config)], work_dir / "kafka.log")
    bootstrap = f"127.0.0.1:{ports.plaintext}"
    try:
        wait_issuer(issuer)
        service.start()
        service.wait_ready(
            lambda: _answers_metadata(bootstrap), timeout, "answering metadata requests"
        )
    except BaseException:
        service.stop()
        issuer.stop()
        raise
    return KafkaBroker(
        bootstrap_servers=bootstrap,
        service=service,
        mtls_bootstrap=f"{host}:{ports.mtls}",
        sasl_ssl_bootstrap=f"{host}:{ports.sasl_ssl}",
        sasl_plaintext_bootstrap=f"{host}:{ports.sasl_plaintext}",
        pki=pki,
        issuer=issuer,
        plain_users=plain_users,
        pod_bootstrap_servers=pod_listener,
    )


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64, never starting with '-' (the
    storage tool would read it as an option; Kafka's own random-uuid avoids it the same way)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
