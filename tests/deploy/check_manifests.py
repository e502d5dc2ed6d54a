#!/usr/bin/python3
"""Consistency checks of pdserve's Kubernetes manifests (deploy/k8s), as rendered by kustomize.

For the base and every overlay, `kubectl kustomize` renders the objects; then:
  - every pdserve container runs `pdserve <subcommand>` with a subcommand the binary has, and flags
    the binary accepts (`pdserve --helpfull`; absl prints --flag_name, manifests say --flag-name),
    written --name=value; a flag documented for other subcommands ("router: ...") is refused;
  - every $(VAR) in args is defined in the container's env; configMapKeyRefs name a rendered
    ConfigMap and one of its keys; volumes name rendered PVCs and ConfigMaps;
  - --listen and --http-listen ports are declared containerPorts; probes point at declared ports,
    gRPC probes at the --listen port; each container has startup, readiness and liveness probes,
    and cpu/memory requests and limits;
  - terminationGracePeriodSeconds covers the preStop sleep plus --drain-seconds (or its default);
  - workload, Service, PodDisruptionBudget and ServiceMonitor selectors select pod templates
    (Services) in their namespace; Service targetPorts exist in the selected pods; every
    ServiceMonitor endpoint names a port of the Services it selects, which leads to the container's
    --http-listen port, and every Service with an "http" port is scraped by some ServiceMonitor;
  - HPAs target a rendered workload, and their pods metrics are served by the Prometheus Adapter
    rules ConfigMap;
  - the shared-memory design: kvstore, prefill and decode pods run with hostIPC and one runAsUser
    (the Dockerfile's USER); decode's --kvstore port is the kvstore DaemonSet's hostPort; the
    workers' --router names the router Service and one of its ports, leading to the router's
    --listen port;
  - an overlay whose name contains "gpu" gives prefill and decode nvidia.com/gpu limits; any other
    rendering requests no GPU at all;
  - TLS (docs/deploy.md, "TLS"): no container runs with --insecure (except in an overlay whose name
    contains "insecure", where all of them do, with plain-HTTP probes and scrapes); each passes
    --tls-cert, --tls-key and --tls-ca as the files tls.crt, tls.key and ca.crt of the Secret volume
    pdserve-<role>-tls that it mounts read-only (its own role's, no other); its startup, readiness
    and liveness probes are httpGet with scheme HTTPS on the --http-listen port, /healthz for
    startup and liveness, /readyz for readiness (the kubelet's gRPC probes cannot speak TLS);
    ServiceMonitor endpoints that reach them use scheme https with a tlsConfig CA (ca.crt of a
    pdserve-<role>-tls Secret) and a serverName; where cert-manager Certificates are rendered
    (deploy/k8s/components/cert-manager), every mounted Secret is issued by one whose commonName is
    the role, with server and client auth usages, naming the ServiceMonitor's serverName and, for
    the router, the host of the workers' --router.
Components (deploy/k8s/components/*/) are rendered on top of the base as "base+components/<name>".
Every problem is printed as "<rendering>: <Kind>/<namespace>/<name>: <field>: <what is wrong>";
the exit status is 1 when there is any.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    sys.exit("check_manifests.py: PyYAML is missing (Debian: apt-get install python3-yaml; "
             "scripts/setup.sh installs it)")

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")
PDSERVE_SERVICES = ("router", "prefill", "decode", "kvstore")
# terminationGracePeriodSeconds must cover any preStop sleep plus the drain budget: the
# container's --drain-seconds, else that flag's default as `pdserve --helpfull` prints it.
DRAIN_FLAG = "drain_seconds"
# Pods that map the kvstore's shared memory (kvstore.yaml explains the choice).
SHM_SUBCOMMANDS = ("kvstore", "prefill", "decode")
# TLS: the Secret each role mounts (kubernetes.io/tls plus ca.crt, cert-manager's layout) and the
# key in it each flag names.
TLS_SECRET = "pdserve-{}-tls"
TLS_FLAG_KEYS = (("tls_cert", "tls.crt"), ("tls_key", "tls.key"), ("tls_ca", "ca.crt"))
# httpGet probe paths (services/common/http_server.h).
PROBE_PATHS = {"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}


class Problems:
    def __init__(self):
        self.items = []

    def add(self, where, obj, field, message):
        meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
        ident = "{}/{}/{}".format(obj.get("kind", "?") if isinstance(obj, dict) else "?",
                                  meta.get("namespace", "-"), meta.get("name", "?"))
        self.items.append("{}: {}: {}: {}".format(where, ident, field, message))


def run(cmd):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return result.returncode, result.stdout


def binary_interface(pdserve):
    """The flags (name -> (help text, default)) and the subcommands the binary accepts."""
    _, helpfull = run([pdserve, "--helpfull"])
    flags = {}
    current = None
    for line in helpfull.splitlines():
        match = re.match(r"^ {2,6}--([A-Za-z0-9_]+) \((.*)$", line)
        if match:
            current = match.group(1)
            flags[current] = match.group(2)
        elif current and line.startswith("      "):
            flags[current] += " " + line.strip()
        else:
            current = None
    for flag, text in flags.items():
        default = re.search(r"\); default: (.*);$", text)
        flags[flag] = (text, default.group(1).strip('"') if default else None)
    _, usage = run([pdserve, "help"])
    commands = set()
    in_commands = False
    for line in usage.splitlines():
        if line.strip() == "commands:":
            in_commands = True
            continue
        if in_commands:
            match = re.match(r"^  ([a-z][a-z0-9-]*)\s", line)
            if match:
                commands.add(match.group(1))
            elif not line.startswith("   "):
                in_commands = False
    if len(flags) < 20 or not commands:
        sys.exit("check_manifests.py: could not read the flags ({}) or commands ({}) of {}:\n{}"
                 .format(len(flags), len(commands), pdserve, helpfull[:2000]))
    return flags, commands


def render(kubectl, directory):
    code, out = run([kubectl, "kustomize", directory])
    if code != 0:
        return None, out
    try:
        return [d for d in yaml.safe_load_all(out) if d], None
    except yaml.YAMLError as error:
        return None, "rendered YAML does not parse: {}".format(error)


def ns(obj):
    return obj.get("metadata", {}).get("namespace", "default")


def name(obj):
    return obj.get("metadata", {}).get("name", "?")


def selects(selector, labels):
    """A matchLabels-style selector (dict) against labels; empty selects nothing here."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_templates(objects):
    """(workload, pod template) for every workload."""
    for obj in objects:
        if obj.get("kind") in WORKLOAD_KINDS:
            yield obj, obj.get("spec", {}).get("template", {})


def port_number(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def address_port(address):
    """Port of "host:port" (the host may be $(POD_IP), a name or an IPv4 address)."""
    if ":" not in address:
        return None
    return port_number(address.rsplit(":", 1)[1])


def parse_args(container):
    """{flag_name_with_underscores: value or None} and the subcommand, from a container's args."""
    args = [str(a) for a in container.get("args", []) or []]
    command = container.get("command")
    subcommand = None
    if command:
        rest = [str(c) for c in command]
        args = rest[1:] + args
    if args and not args[0].startswith("-"):
        subcommand = args[0]
        args = args[1:]
    return subcommand, args


def plaintext(values):
    """Whether parsed args run the process with --insecure (--insecure=false does not)."""
    return "insecure" in values and str(values["insecure"]).lower() != "false"


def is_pdserve(container):
    image = str(container.get("image", ""))
    base = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    command = container.get("command") or []
    return base.startswith("pdserve") or (command and os.path.basename(str(command[0])) == "pdserve")


class Checker:
    def __init__(self, where, objects, flags, commands, problems, gpu_expected, docker_uid,
                 plaintext_ok=False):
        self.where = where
        self.plaintext_ok = plaintext_ok
        self.objects = objects
        self.flags = flags
        self.commands = commands
        self.p = problems
        self.gpu_expected = gpu_expected
        self.docker_uid = docker_uid
        self.by_kind = {}
        for obj in objects:
            self.by_kind.setdefault(obj.get("kind"), []).append(obj)
        # Per pdserve container: (workload, template, container, subcommand, {flag: value}).
        self.pdserve = []

    def add(self, obj, field, message):
        self.p.add(self.where, obj, field, message)

    def find(self, kind, namespace, obj_name):
        for obj in self.by_kind.get(kind, []):
            if name(obj) == obj_name and ns(obj) == namespace:
                return obj
        return None

    # ---- containers ----
    def check_container(self, workload, template, index, container):
        field = "spec.template.spec.containers[{}]({})".format(index, container.get("name"))
        subcommand, args = parse_args(container)
        if subcommand is None:
            self.add(workload, field + ".args", "no pdserve subcommand (want one of {})".format(
                ", ".join(PDSERVE_SERVICES)))
            return
        if subcommand not in self.commands:
            self.add(workload, field + ".args[0]", "'{}' is not a pdserve command ({})".format(
                subcommand, ", ".join(sorted(self.commands))))
        values = {}
        env_names = {e.get("name") for e in container.get("env", []) or []}
        for i, arg in enumerate(args):
            where = "{}.args: '{}'".format(field, arg)
            match = re.match(r"^--([A-Za-z0-9_-]+)(=(.*))?$", arg, re.DOTALL)
            if not match:
                self.add(workload, where, "not a --flag=value argument")
                continue
            flag = match.group(1).replace("-", "_")
            value = match.group(3)
            if match.group(2) is None:
                self.add(workload, where, "write --{}=VALUE: a separate value argument is "
                         "ambiguous".format(match.group(1)))
            plain = flag[2:] if flag.startswith("no") and flag[2:] in self.flags else flag
            if plain not in self.flags:
                self.add(workload, where, "pdserve has no flag --{} (pdserve --helpfull)".format(
                    match.group(1)))
            else:
                scope = re.match(r"^([a-z][a-z/-]*): ", self.flags[plain][0])
                if scope:
                    roles = scope.group(1).split("/")
                    if all(r in self.commands or r in ("prefill", "decode") for r in roles) and \
                            subcommand not in roles:
                        self.add(workload, where, "--{} is a flag of {}, not of `pdserve {}`"
                                 .format(match.group(1), "/".join(roles), subcommand))
            if flag in values:
                self.add(workload, where, "--{} given twice".format(match.group(1)))
            values[flag] = value
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value or ""):
                if var not in env_names:
                    self.add(workload, where, "$({}) is not in the container's env, so "
                             "Kubernetes passes it literally".format(var))
        self.pdserve.append((workload, template, container, subcommand, values))
        self.check_env(workload, field, container)
        tls = self.check_tls(workload, template, field, container, subcommand, values)
        self.check_ports_and_probes(workload, template, field, container, subcommand, values, tls)
        self.check_resources(workload, field, container)

    def check_tls(self, workload, template, field, container, subcommand, values):
        """The role's Secret mounted and named by --tls-cert/--tls-key/--tls-ca; True with TLS."""
        if plaintext(values):
            if not self.plaintext_ok:
                self.add(workload, "{}.args: '--insecure={}'".format(field, values["insecure"]),
                         "plaintext (--insecure): pass --tls-cert, --tls-key and --tls-ca from "
                         "the Secret {} instead (only an overlay named *insecure* may run "
                         "plaintext)".format(TLS_SECRET.format(subcommand)))
            elif values["insecure"] != "true":
                self.add(workload, "{}.args: '--insecure={}'".format(field, values["insecure"]),
                         "write --insecure=true")
            return False
        secret_name = TLS_SECRET.format(subcommand)
        pod = template.get("spec", {})
        volumes = {v.get("name"): v for v in pod.get("volumes", []) or []}
        # (mountPath, volumeMount, the pod's volume) for each of this container's mounts.
        mounts = []
        for mount in container.get("volumeMounts", []) or []:
            volume = volumes.get(mount.get("name")) or {}
            mounts.append((str(mount.get("mountPath", "")).rstrip("/"), mount, volume))
        own = [(path, m, v) for path, m, v in mounts
               if (v.get("secret") or {}).get("secretName") == secret_name]
        for path, mount, volume in mounts:
            other = (volume.get("secret") or {}).get("secretName") or ""
            if other != secret_name and re.match(r"^pdserve-[a-z]+-tls$", other):
                self.add(workload, "{}.volumeMounts({})".format(field, mount.get("name")),
                         "mounts Secret {}, not its role's Secret {}".format(other, secret_name))
        if not own:
            self.add(workload, field + ".volumeMounts", "does not mount its role's Secret {} "
                     "(`pdserve {}` needs its certificate)".format(secret_name, subcommand))
        for path, mount, volume in own:
            if not mount.get("readOnly"):
                self.add(workload, "{}.volumeMounts({})".format(field, mount.get("name")),
                         "mount the Secret readOnly: true")
        for flag, key in TLS_FLAG_KEYS:
            option = "--" + flag.replace("_", "-")
            value = values.get(flag)
            if not value:
                self.add(workload, field + ".args", "no {} (TLS needs --tls-cert, --tls-key and "
                         "--tls-ca; --insecure is refused)".format(option))
                continue
            if not own:
                continue
            found = None
            for path, mount, volume in own:
                if os.path.dirname(value) != path:
                    continue
                items = (volume.get("secret") or {}).get("items")
                name_in_volume = os.path.basename(value)
                if items:
                    keys = [i.get("key") for i in items if i.get("path") == name_in_volume]
                    found = keys[0] if keys else None
                else:
                    found = name_in_volume
            if found != key:
                self.add(workload, "{}.args: '{}={}'".format(field, option, value),
                         "is not the file {} of the mounted Secret {} ({})".format(
                             key, secret_name, ", ".join(p for p, _, _ in own)))
        return True

    def check_env(self, workload, field, container):
        for i, env in enumerate(container.get("env", []) or []):
            ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
            if not ref:
                continue
            where = "{}.env[{}]({})".format(field, i, env.get("name"))
            cm = self.find("ConfigMap", ns(workload), ref.get("name"))
            if cm is None:
                if not ref.get("optional"):
                    self.add(workload, where, "ConfigMap '{}' is not rendered in namespace {}"
                             .format(ref.get("name"), ns(workload)))
            elif ref.get("key") not in (cm.get("data") or {}):
                self.add(workload, where, "ConfigMap '{}' has no key '{}' (keys: {})".format(
                    ref.get("name"), ref.get("key"), ", ".join(sorted(cm.get("data") or {}))))

    def check_ports_and_probes(self, workload, template, field, container, subcommand, values,
                               tls):
        ports = container.get("ports", []) or []
        numbers = {p.get("containerPort") for p in ports}
        names = {p.get("name"): p.get("containerPort") for p in ports if p.get("name")}
        listen_port = None
        http_port = None
        for flag in ("listen", "http_listen"):
            if flag not in values:
                self.add(workload, field + ".args", "no --{} (a service must listen on a fixed, "
                         "declared port)".format(flag.replace("_", "-")))
                continue
            port = address_port(values[flag] or "")
            if port is None or port == 0:
                self.add(workload, "{}.args: --{}={}".format(field, flag.replace("_", "-"),
                                                            values[flag]),
                         "needs a fixed port (host:port, port not 0)")
            elif port not in numbers:
                self.add(workload, "{}.args: --{}={}".format(field, flag.replace("_", "-"),
                                                            values[flag]),
                         "port {} is not a declared containerPort ({})".format(
                             port, sorted(n for n in numbers if n)))
            if flag == "listen":
                listen_port = port
            else:
                http_port = port
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(probe_name)
            where = "{}.{}".format(field, probe_name)
            if not probe:
                self.add(workload, where, "missing")
                continue
            handler = [k for k in ("grpc", "httpGet", "tcpSocket", "exec") if k in probe]
            if not handler:
                self.add(workload, where, "no grpc, httpGet, tcpSocket or exec handler")
                continue
            spec = probe[handler[0]]
            if handler[0] == "exec":
                continue
            port = spec.get("port")
            number = names.get(port) if isinstance(port, str) else port
            if number is None or number not in numbers:
                self.add(workload, "{}.{}.port".format(where, handler[0]),
                         "{} is not a declared containerPort ({})".format(
                             port, sorted(n for n in numbers if n)))
            elif handler[0] == "grpc" and listen_port is not None and number != listen_port:
                self.add(workload, "{}.grpc.port".format(where),
                         "{} is not the gRPC --listen port {}".format(port, listen_port))
            elif handler[0] == "httpGet" and http_port is not None and number != http_port:
                self.add(workload, "{}.httpGet.port".format(where),
                         "{} is not the --http-listen port {} (/healthz, /readyz)".format(
                             port, http_port))
            self.check_probe_tls(workload, where, probe_name, handler[0], spec, tls)
        grace = template.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        pre_stop = 0
        command = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}) \
            .get("command") or []
        if command and os.path.basename(str(command[0])) == "sleep" and len(command) > 1:
            pre_stop = float(command[1])
        sleep = (((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {})
        pre_stop += float(sleep.get("seconds", 0))
        budget = values.get(DRAIN_FLAG) or (self.flags.get(DRAIN_FLAG) or (None, None))[1]
        try:
            budget = float(budget)
        except (TypeError, ValueError):
            self.add(workload, field + ".args", "no drain budget: pass --drain-seconds=N")
            return
        if grace < pre_stop + budget:
            self.add(workload, "spec.template.spec.terminationGracePeriodSeconds",
                     "{} s does not cover preStop {:g} s + the drain budget (--drain-seconds) "
                     "{:g} s".format(grace, pre_stop, budget))

    def check_probe_tls(self, workload, where, probe_name, handler, spec, tls):
        """With TLS: httpGet, scheme HTTPS, /healthz or /readyz. Plaintext: not HTTPS."""
        scheme = str(spec.get("scheme", "HTTP")).upper() if handler == "httpGet" else None
        if not tls:
            if scheme == "HTTPS":
                self.add(workload, where + ".httpGet.scheme", "HTTPS against a plaintext "
                         "(--insecure) process")
            return
        if handler != "httpGet":
            self.add(workload, "{}.{}".format(where, handler), "with TLS probes must be httpGet "
                     "with scheme: HTTPS on the HTTP port (the kubelet's gRPC probes cannot speak "
                     "TLS)")
            return
        if scheme != "HTTPS":
            self.add(workload, where + ".httpGet.scheme", "{}: want scheme HTTPS (the HTTP port "
                     "is HTTPS with TLS)".format(scheme))
        want = PROBE_PATHS[probe_name]
        if spec.get("path") != want:
            self.add(workload, where + ".httpGet.path", "{}: want {} ({})".format(
                spec.get("path"), want, "200 only while serving" if want == "/readyz"
                else "the process answers"))

    def check_resources(self, workload, field, container):
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in (resources.get(kind) or {}):
                    self.add(workload, "{}.resources.{}.{}".format(field, kind, resource),
                             "missing")
        gpus = [(resources.get(k) or {}).get("nvidia.com/gpu") for k in ("requests", "limits")]
        return gpus

    # ---- pods ----
    def check_workloads(self):
        for workload, template in pod_templates(self.objects):
            labels = template.get("metadata", {}).get("labels") or {}
            selector = (workload.get("spec", {}).get("selector") or {})
            if selector.get("matchExpressions"):
                self.add(workload, "spec.selector.matchExpressions", "not supported by this check")
            if workload.get("kind") != "Job" and not selects(selector.get("matchLabels"), labels):
                self.add(workload, "spec.selector.matchLabels",
                         "{} does not select the pod template's labels {}".format(
                             selector.get("matchLabels"), labels))
            pod = template.get("spec", {})
            volumes = {v.get("name"): v for v in pod.get("volumes", []) or []}
            for v in volumes.values():
                claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
                if claim and self.find("PersistentVolumeClaim", ns(workload), claim) is None:
                    self.add(workload, "spec.template.spec.volumes({})".format(v.get("name")),
                             "PersistentVolumeClaim '{}' is not rendered".format(claim))
                cm = (v.get("configMap") or {}).get("name")
                if cm and self.find("ConfigMap", ns(workload), cm) is None:
                    self.add(workload, "spec.template.spec.volumes({})".format(v.get("name")),
                             "ConfigMap '{}' is not rendered".format(cm))
            for index, container in enumerate(pod.get("containers", []) or []):
                for mount in container.get("volumeMounts", []) or []:
                    if mount.get("name") not in volumes:
                        self.add(workload, "spec.template.spec.containers[{}].volumeMounts({})"
                                 .format(index, mount.get("name")), "no such volume in the pod")
                if is_pdserve(container):
                    self.check_container(workload, template, index, container)
        if not self.pdserve:
            self.p.add(self.where, {}, "-", "no pdserve containers rendered")

    def check_design(self):
        """Shared memory, node-local kvstore discovery, router address, GPUs."""
        seen = {c[3] for c in self.pdserve}
        for needed in PDSERVE_SERVICES:
            if needed not in seen:
                self.p.add(self.where, {}, "-", "no container runs `pdserve {}`".format(needed))
        uids = {}
        kvstore_host_ports = set()
        for workload, template, container, subcommand, values in self.pdserve:
            pod = template.get("spec", {})
            if subcommand == "kvstore":
                if workload.get("kind") != "DaemonSet":
                    self.add(workload, "kind", "the kvstore must be a DaemonSet (one per node)")
                kvstore_host_ports |= {p.get("hostPort") for p in container.get("ports", []) or []
                                       if p.get("hostPort") and
                                       p.get("containerPort") == address_port(
                                           values.get("listen") or "")}
            if subcommand in SHM_SUBCOMMANDS:
                if not pod.get("hostIPC"):
                    self.add(workload, "spec.template.spec.hostIPC", "must be true: `pdserve {}` "
                             "maps the kvstore's SysV shared memory".format(subcommand))
                uid = (container.get("securityContext") or {}).get("runAsUser",
                                                                   (pod.get("securityContext")
                                                                    or {}).get("runAsUser"))
                uids.setdefault(uid, []).append(workload)
            gpu = [((container.get("resources") or {}).get(k) or {}).get("nvidia.com/gpu")
                   for k in ("limits",)][0]
            if self.gpu_expected and subcommand in ("prefill", "decode"):
                if not gpu or int(gpu) < 1:
                    self.add(workload, "spec.template.spec.containers({}).resources.limits"
                             .format(container.get("name")), "no nvidia.com/gpu limit in a GPU "
                             "overlay")
            if not self.gpu_expected:
                for kind in ("requests", "limits"):
                    if ((container.get("resources") or {}).get(kind) or {}).get("nvidia.com/gpu"):
                        self.add(workload, "spec.template.spec.containers({}).resources.{}"
                                 .format(container.get("name"), kind),
                                 "requests nvidia.com/gpu outside a GPU overlay")
        if len(uids) > 1 or (uids and None in uids):
            for uid, workloads in uids.items():
                for w in workloads:
                    self.add(w, "securityContext.runAsUser", "{}: kvstore, prefill and decode must "
                             "share one UID (SysV segments are mode 0600)".format(uid))
        elif uids and self.docker_uid is not None and next(iter(uids)) != self.docker_uid:
            for w in next(iter(uids.values())):
                self.add(w, "securityContext.runAsUser", "{} is not the Dockerfile's USER {}"
                         .format(next(iter(uids)), self.docker_uid))
        for workload, template, container, subcommand, values in self.pdserve:
            if subcommand == "decode" and not values.get("monolithic"):
                kv = values.get("kvstore")
                if not kv:
                    self.add(workload, "args", "decode needs --kvstore=$(NODE_IP):PORT")
                else:
                    if address_port(kv) not in kvstore_host_ports:
                        self.add(workload, "args: --kvstore={}".format(kv),
                                 "port is not the kvstore DaemonSet's hostPort {}".format(
                                     sorted(kvstore_host_ports)))
                    host_var = re.match(r"^\$\(([A-Za-z_0-9]+)\):", kv)
                    env = {e.get("name"): e for e in container.get("env", []) or []}
                    if not host_var or ((env.get(host_var.group(1)) or {}).get("valueFrom") or {}) \
                            .get("fieldRef", {}).get("fieldPath") != "status.hostIP":
                        self.add(workload, "args: --kvstore={}".format(kv),
                                 "host must be a variable from the downward API status.hostIP "
                                 "(the node-local kvstore)")
            if subcommand in ("prefill", "decode"):
                self.check_router_address(workload, values)

    def check_router_address(self, workload, values):
        router = values.get("router")
        if not router:
            self.add(workload, "args", "no --router")
            return
        host, _, port = router.rpartition(":")
        parts = host.split(".")
        service = self.find("Service", parts[1] if len(parts) > 1 else ns(workload), parts[0])
        if service is None:
            self.add(workload, "args: --router=" + router, "no rendered Service '{}'".format(host))
            return
        sport = [p for p in service.get("spec", {}).get("ports", []) if p.get("port") ==
                 port_number(port)]
        if not sport:
            self.add(workload, "args: --router=" + router, "Service {} has no port {}".format(
                name(service), port))
            return
        for w, template, container, subcommand, v in self.pdserve:
            if selects(service.get("spec", {}).get("selector"),
                       template.get("metadata", {}).get("labels") or {}):
                target = self.resolve_target(container, sport[0].get("targetPort", sport[0]
                                                                      .get("port")))
                if subcommand != "router" or target != address_port(v.get("listen") or ""):
                    self.add(workload, "args: --router=" + router, "leads to `pdserve {}` port {}, "
                             "not a router's --listen port".format(subcommand, target))

    @staticmethod
    def resolve_target(container, target):
        if isinstance(target, int):
            return target
        for p in container.get("ports", []) or []:
            if p.get("name") == target:
                return p.get("containerPort")
        return None

    # ---- Services, PDBs, HPAs, ServiceMonitors ----
    def selected_templates(self, namespace, selector):
        return [(w, t) for w, t in pod_templates(self.objects)
                if ns(w) == namespace and selects(selector, t.get("metadata", {}).get("labels")
                                                  or {})]

    def check_services(self):
        for service in self.by_kind.get("Service", []):
            selector = service.get("spec", {}).get("selector")
            if not selector:
                self.add(service, "spec.selector", "empty: selects no pods")
                continue
            matched = self.selected_templates(ns(service), selector)
            if not matched:
                self.add(service, "spec.selector", "{} selects no pod template".format(selector))
            for port in service.get("spec", {}).get("ports", []) or []:
                target = port.get("targetPort", port.get("port"))
                for workload, template in matched:
                    found = any(self.resolve_target(c, target) is not None and
                                (isinstance(target, str) or
                                 target in {p.get("containerPort") for p in c.get("ports", [])
                                            or []})
                                for c in template.get("spec", {}).get("containers", []))
                    if not found:
                        self.add(service, "spec.ports({}).targetPort".format(port.get("name")),
                                 "{} is not a container port of {} {}".format(
                                     target, workload.get("kind"), name(workload)))

    def check_pdbs(self):
        for pdb in self.by_kind.get("PodDisruptionBudget", []):
            selector = (pdb.get("spec", {}).get("selector") or {}).get("matchLabels")
            if not self.selected_templates(ns(pdb), selector):
                self.add(pdb, "spec.selector.matchLabels", "{} selects no pod template".format(
                    selector))

    def adapter_metrics(self):
        metrics = set()
        for cm in self.by_kind.get("ConfigMap", []):
            for key, text in (cm.get("data") or {}).items():
                if "seriesQuery" not in text:
                    continue
                try:
                    config = yaml.safe_load(text) or {}
                except yaml.YAMLError as error:
                    self.add(cm, "data." + key, "does not parse: {}".format(error))
                    continue
                for rule in config.get("rules", []) or []:
                    as_name = (rule.get("name") or {}).get("as")
                    if as_name:
                        metrics.add(as_name)
                    else:
                        series = re.match(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)", rule.get(
                            "seriesQuery", ""))
                        if series:
                            metrics.add(series.group(1))
        return metrics

    def check_hpas(self):
        served = self.adapter_metrics()
        for hpa in self.by_kind.get("HorizontalPodAutoscaler", []):
            ref = hpa.get("spec", {}).get("scaleTargetRef") or {}
            target = self.find(ref.get("kind"), ns(hpa), ref.get("name"))
            if target is None:
                self.add(hpa, "spec.scaleTargetRef", "{} {} is not rendered".format(
                    ref.get("kind"), ref.get("name")))
            for i, metric in enumerate(hpa.get("spec", {}).get("metrics", []) or []):
                if metric.get("type") in ("Pods", "Object", "External"):
                    spec = metric.get(metric["type"][0].lower() + metric["type"][1:]) or {}
                    metric_name = (spec.get("metric") or {}).get("name")
                    if metric_name not in served:
                        self.add(hpa, "spec.metrics[{}]".format(i), "custom metric '{}' is not "
                                 "served by the Prometheus Adapter rules ({})".format(
                                     metric_name, sorted(served)))

    def check_service_monitors(self):
        scraped = set()
        for monitor in self.by_kind.get("ServiceMonitor", []):
            spec = monitor.get("spec", {})
            selector = (spec.get("selector") or {}).get("matchLabels")
            namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [ns(monitor)]
            services = [s for s in self.by_kind.get("Service", [])
                        if ns(s) in namespaces and
                        selects(selector, s.get("metadata", {}).get("labels") or {})]
            if not services:
                self.add(monitor, "spec.selector.matchLabels",
                         "{} selects no Service in {}".format(selector, namespaces))
            for i, endpoint in enumerate(spec.get("endpoints", []) or []):
                port = endpoint.get("port")
                for service in services:
                    sports = [p for p in service.get("spec", {}).get("ports", []) or []
                              if p.get("name") == port]
                    if not sports:
                        self.add(monitor, "spec.endpoints[{}].port".format(i),
                                 "Service {} has no port named '{}'".format(name(service), port))
                        continue
                    scraped.add((ns(service), name(service), port))
                    if self.check_metrics_port(monitor, i, service, sports[0]):
                        self.check_metrics_tls(monitor, i, endpoint)
                    elif endpoint.get("scheme") == "https":
                        self.add(monitor, "spec.endpoints[{}].scheme".format(i), "https "
                                 "against plaintext (--insecure) processes")
        for service in self.by_kind.get("Service", []):
            for port in service.get("spec", {}).get("ports", []) or []:
                if port.get("name") == "http" and (ns(service), name(service), "http") not in \
                        scraped:
                    self.add(service, "spec.ports(http)", "no ServiceMonitor scrapes it")

    def check_metrics_port(self, monitor, index, service, sport):
        """The ServiceMonitor's port must reach the pods' --http-listen port (/metrics). Whether
        a pod it reaches serves TLS."""
        target = sport.get("targetPort", sport.get("port"))
        selector = service.get("spec", {}).get("selector")
        tls = False
        for workload, template, container, subcommand, values in self.pdserve:
            if ns(workload) != ns(service) or not selects(
                    selector, template.get("metadata", {}).get("labels") or {}):
                continue
            tls = tls or not plaintext(values)
            number = self.resolve_target(container, target)
            http = address_port(values.get("http_listen") or "")
            if number is None or number != http:
                self.add(monitor, "spec.endpoints[{}].port".format(index),
                         "Service {} port {} leads to {} port {}, not its --http-listen port {} "
                         "(/metrics)".format(name(service), sport.get("name"), name(workload),
                                             number, http))
        return tls

    def check_metrics_tls(self, monitor, index, endpoint):
        """HTTPS /metrics: scheme https, verified under the CA, with a name to verify."""
        where = "spec.endpoints[{}]".format(index)
        if endpoint.get("scheme") != "https":
            self.add(monitor, where + ".scheme", "{}: want scheme: https (the pods' /metrics is "
                     "HTTPS with TLS)".format(endpoint.get("scheme", "http (the default)")))
        config = endpoint.get("tlsConfig") or {}
        if config.get("insecureSkipVerify"):
            self.add(monitor, where + ".tlsConfig.insecureSkipVerify", "verify the pods "
                     "under the CA instead")
        ca = config.get("ca") or {}
        secret = ca.get("secret") or {}
        if not (secret or ca.get("configMap") or config.get("caFile")):
            self.add(monitor, where + ".tlsConfig.ca", "missing: Prometheus must verify the "
                     "pods' certificates under the CA (ca.crt of a pdserve-<role>-tls Secret)")
        elif secret and (not re.match(r"^pdserve-[a-z]+-tls$", str(secret.get("name"))) or
                         secret.get("key") != "ca.crt"):
            self.add(monitor, where + ".tlsConfig.ca.secret", "{}/{}: want key ca.crt of a "
                     "pdserve-<role>-tls Secret".format(secret.get("name"), secret.get("key")))
        if not config.get("serverName"):
            self.add(monitor, where + ".tlsConfig.serverName", "missing: Prometheus scrapes pod "
                     "IPs, which the certificates do not name")

    def check_tls_consistent(self):
        """TLS everywhere or plaintext everywhere: a TLS client cannot call a plaintext server."""
        plain = [w for w, _, _, _, v in self.pdserve if plaintext(v)]
        if plain and len(plain) != len(self.pdserve):
            for workload in plain:
                self.add(workload, "args", "--insecure while other components use TLS: they "
                         "cannot call each other")

    def check_certificates(self):
        """cert-manager Certificates, where rendered: one per mounted pdserve Secret, of its role,
        naming what its clients verify."""
        certificates = self.by_kind.get("Certificate", [])
        if not certificates:
            return
        by_secret = {}
        for cert in certificates:
            by_secret.setdefault((ns(cert), cert.get("spec", {}).get("secretName")), []).append(
                cert)
        # What clients verify, per Secret: ServiceMonitor serverNames, and the router's Service
        # host in the workers' --router.
        names = {}
        for monitor in self.by_kind.get("ServiceMonitor", []):
            for endpoint in monitor.get("spec", {}).get("endpoints", []) or []:
                config = endpoint.get("tlsConfig") or {}
                secret = ((config.get("ca") or {}).get("secret") or {}).get("name")
                if secret and config.get("serverName"):
                    names.setdefault((ns(monitor), secret), set()).add(
                        ("the ServiceMonitor's serverName", config["serverName"]))
        for workload, template, container, subcommand, values in self.pdserve:
            if subcommand in ("prefill", "decode") and values.get("router"):
                host = values["router"].rpartition(":")[0]
                names.setdefault((ns(workload), TLS_SECRET.format("router")), set()).add(
                    ("the workers' --router", host))
        for workload, template, container, subcommand, values in self.pdserve:
            if plaintext(values):
                continue
            key = (ns(workload), TLS_SECRET.format(subcommand))
            # Every role's peers verify its role name (core/rpc/tls.h ComponentServerName), and
            # pdserve refuses to start with a certificate that lacks it.
            names.setdefault(key, set()).add(
                ("every internal caller", "{}.pdserve.internal".format(subcommand)))
            issued = by_secret.get(key, [])
            if len(issued) != 1:
                self.add(workload, "spec.template.spec.volumes",
                         "{} Certificates issue Secret {} (want one)".format(len(issued), key[1]))
                continue
            cert = issued[0]
            spec = cert.get("spec", {})
            if spec.get("commonName") != subcommand:
                self.add(cert, "spec.commonName", "{}: must be the role '{}' (pdserve allows "
                         "internal RPCs by the caller's common name)".format(
                             spec.get("commonName"), subcommand))
            usages = set(spec.get("usages") or [])
            for usage in ("server auth", "client auth"):
                if usage not in usages:
                    self.add(cert, "spec.usages", "no '{}': every component is a TLS server and "
                             "client".format(usage))
            dns = set(spec.get("dnsNames") or []) | set(spec.get("ipAddresses") or [])
            for what, wanted in sorted(names.get(key, ())):
                if wanted not in dns:
                    self.add(cert, "spec.dnsNames", "does not name {} ({}), which {} verifies"
                             .format(wanted, key[1], what))

    def run(self):
        self.check_workloads()
        self.check_design()
        self.check_services()
        self.check_pdbs()
        self.check_hpas()
        self.check_service_monitors()
        self.check_tls_consistent()
        self.check_certificates()


def dockerfile_uid(path):
    if not path:
        return None
    try:
        text = open(path).read()
    except OSError as error:
        sys.exit("check_manifests.py: cannot read {}: {}".format(path, error))
    users = re.findall(r"^USER\s+(\d+)", text, re.MULTILINE)
    return int(users[-1]) if users else None


def component_renderings(k8s, scratch):
    """(name, directory) per deploy/k8s/components/<name>/: a kustomization in `scratch` that
    adds the component to the base (kustomize wants relative paths)."""
    components = os.path.join(k8s, "components")
    result = []
    if not os.path.isdir(components):
        return result
    for component in sorted(os.listdir(components)):
        source = os.path.join(components, component)
        if not os.path.isfile(os.path.join(source, "kustomization.yaml")):
            continue
        directory = os.path.join(scratch, component)
        os.makedirs(directory)
        with open(os.path.join(directory, "kustomization.yaml"), "w") as out:
            out.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                      "resources:\n  - {}\ncomponents:\n  - {}\n".format(
                          os.path.relpath(os.path.join(k8s, "base"), directory),
                          os.path.relpath(source, directory)))
        result.append(("base+components/" + component, directory))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdserve", required=True, help="the pdserve binary")
    parser.add_argument("--k8s", required=True, help="deploy/k8s: base/ and overlays/*/")
    parser.add_argument("--kubectl", default=shutil.which("kubectl"))
    parser.add_argument("--dockerfile", help="the Dockerfile whose USER the pods must run as")
    args = parser.parse_args()
    if not args.kubectl:
        sys.exit("check_manifests.py: kubectl is not installed (it renders the kustomizations; "
                 "kustomize is built in since kubectl 1.14)")
    if not os.access(args.pdserve, os.X_OK):
        sys.exit("check_manifests.py: {} is not an executable pdserve".format(args.pdserve))
    flags, commands = binary_interface(args.pdserve)
    docker_uid = dockerfile_uid(args.dockerfile)

    scratch = tempfile.mkdtemp(prefix="pdserve-check-manifests-")
    renderings = [("base", os.path.join(args.k8s, "base"))]
    overlays = os.path.join(args.k8s, "overlays")
    for overlay in sorted(os.listdir(overlays)):
        if os.path.isfile(os.path.join(overlays, overlay, "kustomization.yaml")):
            renderings.append(("overlays/" + overlay, os.path.join(overlays, overlay)))
    renderings += component_renderings(args.k8s, scratch)
    problems = Problems()
    try:
        for where, directory in renderings:
            objects, error = render(args.kubectl, directory)
            if objects is None:
                problems.items.append("{}: kubectl kustomize {} failed:\n{}".format(
                    where, directory, error))
                continue
            last = where.split("/")[-1]
            Checker(where, objects, flags, commands, problems, "gpu" in last, docker_uid,
                    plaintext_ok=where.startswith("overlays/") and "insecure" in last).run()
            print("checked {}: {} objects".format(where, len(objects)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if problems.items:
        print("\n{} problem(s) in the manifests:".format(len(problems.items)))
        for item in problems.items:
            print("  " + item)
        return 1
    print("manifests consistent ({} renderings, {} pdserve flags known)".format(
        len(renderings), len(flags)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
