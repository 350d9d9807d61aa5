#!/usr/bin/env python3
"""Offline checks of halo's container image recipe and deployment files.

Nothing here talks to a cluster or builds an image. It reads Dockerfile,
deploy/**.yaml and the rendered Helm chart (tests/deploy/render_chart.go; Helm
is not packaged in Debian) and checks them against halo itself:

  - every halo command line in them uses only flags that `$HALO_BIN <command>
    --help` lists (not the vLLM compatibility no-ops or refusals), and
    `halo serve --check-config` accepts it;
  - the pod listens where the manifests point: --host 0.0.0.0, containerPort
    == --port, the readiness and startup probes GET /health and the liveness
    probe GET /v2/health/live on that port, Services and InferencePools
    target it and select the pods;
  - terminationGracePeriodSeconds > --shutdown-delay + --shutdown-timeout;
  - the device's resources: cpu asks for no accelerator, cuda for
    nvidia.com/gpu, rbln for an NPU resource;
  - KV events: the topic, POD_IP, PYTHONHASHSEED, --block-size and the
    endpoint agree with the endpoint picker's configuration;
  - the Dockerfile: ENTRYPOINT/CMD/EXPOSE, a non-root USER, no HEALTHCHECK,
    the runtime libraries halo and its plugins need, and the SageMaker
    target's `serve` script.

The checks return lists of problems; the Mutations class breaks copies of the
files on purpose and asserts each check notices.

  HALO_BIN=build/bin/halo python3 tests/deploy/deploy_test.py -v

Needs python3 and python3-yaml; the chart part also golang-go,
golang-github-masterminds-sprig-dev and golang-gopkg-yaml.v3-dev (skipped
without them); kubectl, when present, renders the kustomize overlays a
second time.
"""
import atexit
import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
CHART = os.path.join(DEPLOY, "helm", "halo")
HALO_BIN = os.environ.get("HALO_BIN") or os.path.join(ROOT, "build", "bin", "halo")
EMBEDDED_MODEL = os.path.join(ROOT, "models", "pkgchat-5m")
GOPATH = "/usr/share/gocode"

# Values the kubelet would put into $(VAR) references, for --check-config.
SAMPLE_ENV = {"POD_IP": "10.1.2.3", "NAMESPACE": "default", "HALO_THREADS": "2", "POD_PORT": "8000"}
# Resource names every pod may ask for; anything else is a device.
PLAIN_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


def rel(path):
    return os.path.relpath(path, ROOT)


# --- halo's command line -----------------------------------------------------

class Flag:
    def __init__(self, takes_value, multi, default, compat):
        self.takes_value, self.multi, self.default, self.compat = takes_value, multi, default, compat


def parse_help(text):
    """Flags of one `halo ... --help` text: {name: Flag}. CLI11 prints
    '  --name[,--alias] TYPE[=default]   description'; a type word means the
    flag takes a value, 'TYPE ...' that it takes several."""
    flags = {}
    compat = False
    for line in text.splitlines():
        if line.startswith("vLLM arguments accepted for compatibility"):
            compat = True
            continue
        m = re.match(r"^ {1,4}(-[^\s]+)(.*)$", line)
        if not m:
            continue
        names = [n.split("{")[0] for n in m.group(1).split(",")]
        t = re.match(r"^ (\S.*?)(?:\s{2,}.*)?$", m.group(2))
        type_text = t.group(1) if t else ""
        default = re.search(r"=(\S+)$", type_text.replace(" ...", ""))
        takes_value = bool(type_text) or "--config" in names
        for n in names:
            flags[n] = Flag(takes_value, type_text.endswith("..."), default.group(1) if default else None, compat)
    return flags


_help_cache = {}


def halo_help(*command):
    if command not in _help_cache:
        out = subprocess.run([HALO_BIN, *command, "--help"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{HALO_BIN} {' '.join(command)} --help failed: {out.stderr}")
        _help_cache[command] = parse_help(out.stdout)
    return _help_cache[command]


def parse_argv(tokens, flags):
    """(options [(name, value)], positionals, problems) of a command line."""
    opts, pos, problems = [], [], []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        if t == "--":
            pos += tokens[i:]
            break
        if not t.startswith("-") or t == "-" or re.match(r"^-\d", t):
            pos.append(t)
            continue
        name, eq, value = t.partition("=")
        spec = flags.get(name)
        if spec is None:
            problems.append(f"unknown flag {name}")
            opts.append((name, value if eq else None))
            continue
        if spec.compat:
            problems.append(f"{name} is one of halo's vLLM compatibility flags (no effect or refused)")
        if not spec.takes_value:
            opts.append((name, value if eq else None))
            continue
        if not eq:
            if i >= len(tokens):
                problems.append(f"{name} needs a value")
                value = None
            else:
                value = tokens[i]
                i += 1
                while spec.multi and i < len(tokens) and not tokens[i].startswith("-"):
                    i += 1  # CLI11 takes every following word for a TEXT ... option
        opts.append((name, value))
    return opts, pos, problems


def opt(opts, name, default=None):
    """The last value of a flag (the one CLI11 keeps), else default."""
    values = [v for n, v in opts if n == name]
    return values[-1] if values else default


def has(opts, name):
    return any(n == name for n, _ in opts)


# --- the Dockerfile ----------------------------------------------------------

def parse_dockerfile(text):
    """[(instruction, arguments)] with continuations joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def dockerfile_stages(instrs):
    """{stage: {"from", "instrs"}} in order, plus the ARGs before the first FROM."""
    stages, order, pre = {}, [], []
    current = None
    for word, rest in instrs:
        if word == "FROM":
            m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            name = (m.group(2) or f"stage{len(order)}").lower()
            current = {"from": m.group(1), "instrs": []}
            stages[name] = current
            order.append(name)
        elif current is None:
            pre.append((word, rest))
        else:
            current["instrs"].append((word, rest))
    return stages, order, pre


def stage_config(stages, name):
    """The image config a stage ends with: ENTRYPOINT, CMD, USER, EXPOSE,
    HEALTHCHECK, inherited through FROM <earlier stage>."""
    st = stages[name]
    base = st["from"].lower()
    cfg = stage_config(stages, base) if base in stages else {"ENTRYPOINT": None, "CMD": None, "USER": None,
                                                                "EXPOSE": [], "HEALTHCHECK": None}
    cfg = copy.deepcopy(cfg)
    for word, rest in st["instrs"]:
        if word in ("ENTRYPOINT", "CMD"):
            try:
                cfg[word] = json.loads(rest)
            except ValueError:
                cfg[word] = ("shell", rest)
            if word == "ENTRYPOINT":
                cfg["CMD"] = None  # a new ENTRYPOINT resets an inherited CMD
        elif word == "USER":
            cfg["USER"] = rest
        elif word == "EXPOSE":
            cfg["EXPOSE"] = cfg["EXPOSE"] + [p.split("/")[0] for p in rest.split()]
        elif word == "HEALTHCHECK":
            cfg["HEALTHCHECK"] = rest
    return cfg


@functools.lru_cache(maxsize=None)
def needed_packages():
    """Debian packages of the libraries halo and its plugins link (readelf +
    dpkg), or None where those tools are missing."""
    if not shutil.which("readelf") or not shutil.which("dpkg"):
        return None
    plugins_dir = os.path.join(os.path.dirname(os.path.dirname(HALO_BIN)), "lib", "halo", "plugins")
    files = [HALO_BIN] + [os.path.join(plugins_dir, f"libhalo_plugin_{p}.so") for p in ("cpu", "rbln")
                          if os.path.exists(os.path.join(plugins_dir, f"libhalo_plugin_{p}.so"))]
    libs = set()
    for f in files:
        out = subprocess.run(["readelf", "-d", f], capture_output=True, text=True).stdout
        libs.update(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    if any(lib.startswith(("libasan", "libtsan", "libubsan", "libclang_rt.")) for lib in libs):
        # A sanitizer build links its runtimes and more; the image builds Release.
        print("deploy_test: the library check is skipped: HALO_BIN is a sanitizer build, the image a Release one")
        return None
    pkgs = {}
    for lib in sorted(libs):
        out = subprocess.run(["dpkg", "-S", f"*/{lib}"], capture_output=True, text=True).stdout
        owners = [l.split(":")[0] for l in out.splitlines()]
        owners = [o for o in owners if not o.endswith(("-dev", "-i386")) and not o.startswith(("lib32", "libx32"))]
        pkgs[lib] = sorted(set(owners))
    return pkgs


def build_source_dirs():
    """Top-level directories a Release build without tests reads: the root
    CMakeLists.txt's unconditional add_subdirectory()s and every
    ${PROJECT_SOURCE_DIR}/X their CMake files name."""
    skip = {"tests", "benchmarks", "fuzz", "docs", "build"}
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        top = f.read()
    dirs = {"cmake"}
    depth = 0
    for line in top.splitlines():
        line = line.split("#")[0].strip()
        if re.match(r"^if\s*\(", line):
            depth += 1
        elif re.match(r"^endif\s*\(", line):
            depth -= 1
        m = re.match(r"^add_subdirectory\s*\(\s*([\w.-]+)", line)
        if m and depth == 0:
            dirs.add(m.group(1))
    texts = [top]
    for d in sorted(dirs):
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f == "CMakeLists.txt" or f.endswith(".cmake"):
                    with open(os.path.join(dirpath, f)) as fh:
                        texts.append(fh.read())
    for t in texts:
        for line in t.splitlines():
            line = line.split("#")[0]
            dirs.update(re.findall(r"\$\{(?:PROJECT|CMAKE)_SOURCE_DIR\}/([\w.-]+)", line))
    return sorted(d for d in dirs - skip if os.path.isdir(os.path.join(ROOT, d)))


def check_dockerfile(text, dockerignore, serve_script):
    errors = []
    instrs = parse_dockerfile(text)
    stages, order, pre = dockerfile_stages(instrs)
    if ("ARG", "BASE=debian:12") not in pre:
        errors.append("ARG BASE=debian:12 must come before the first FROM")
    for name in order:
        if stages[name]["from"].lower() not in stages and stages[name]["from"] != "${BASE}":
            errors.append(f"stage {name} starts FROM {stages[name]['from']}, not ${{BASE}}")
    for want in ("build", "runtime", "sagemaker"):
        if want not in stages:
            errors.append(f"no stage named {want}")
    if errors:
        return errors
    if order[-1] != "runtime":
        errors.append(f"the last stage (built without --target) is {order[-1]}, not runtime")

    build = " ".join(r for w, r in stages["build"]["instrs"] if w == "RUN")
    if "scripts/install-deps.sh" not in build:
        errors.append("the build stage does not run scripts/install-deps.sh")
    if "-DHALO_BUILD_TESTS=OFF" not in build:
        errors.append("the build stage does not configure with -DHALO_BUILD_TESTS=OFF")
    targets = next((r for w, r in stages["build"]["instrs"] if w == "ARG" and r.startswith("TARGETS=")), "")
    for t in ("halo", "halo_plugin_cpu", "halo_plugin_rbln"):
        if t not in targets.replace('"', " ").split():
            errors.append(f"the build stage does not build the {t} target")

    runtime = stage_config(stages, "runtime")
    if runtime["HEALTHCHECK"]:
        errors.append("the runtime image has a HEALTHCHECK (Kubernetes probes do that)")
    user = (runtime["USER"] or "root").split(":")[0]
    if user in ("root", "0"):
        errors.append(f"the runtime image runs as {runtime['USER'] or 'root (no USER)'}")
    elif not user.isdigit():
        errors.append(f"USER {user} is not numeric: Kubernetes' runAsNonRoot cannot verify a name")
    if runtime["ENTRYPOINT"] != ["halo"]:
        errors.append(f"ENTRYPOINT is {runtime['ENTRYPOINT']}, not [\"halo\"] in exec form")
    cmd = runtime["CMD"]
    if not isinstance(cmd, list) or not cmd or cmd[0] != "serve":
        errors.append(f"CMD is {cmd}, not an exec-form `serve ...`")
    else:
        opts, pos, problems = parse_argv(cmd[1:], halo_help("serve"))
        errors += [f"CMD: {p}" for p in problems]
        port = opt(opts, "--port", halo_help("serve")["--port"].default)
        if port not in runtime["EXPOSE"]:
            errors.append(f"CMD serves on port {port} but EXPOSE is {runtime['EXPOSE']}")
        if opt(opts, "--host") not in ("0.0.0.0", "::"):
            errors.append(f"CMD listens on {opt(opts, '--host', '127.0.0.1 (the default)')}: unreachable from outside")

    sm = stage_config(stages, "sagemaker")
    if sm["ENTRYPOINT"] not in ([], None):
        errors.append(f"the sagemaker target's ENTRYPOINT is {sm['ENTRYPOINT']}: `docker run IMAGE serve` must run serve")
    if sm["CMD"] != ["serve"]:
        errors.append(f"the sagemaker target's CMD is {sm['CMD']}, not [\"serve\"]")
    if "8080" not in sm["EXPOSE"]:
        errors.append("the sagemaker target does not EXPOSE 8080")
    user = (sm["USER"] or "root").split(":")[0]
    if user in ("root", "0"):
        errors.append("the sagemaker target runs as root")
    copies = [r for w, r in stages["sagemaker"]["instrs"] if w == "COPY"]
    if not any(re.search(r"deploy/sagemaker/serve\s+/usr/(local/)?bin/serve$", c) for c in copies):
        errors.append("the sagemaker target does not COPY deploy/sagemaker/serve to /usr/local/bin/serve")
    errors += check_serve_script(serve_script)

    # The build stage copies the sources selectively: every top-level
    # directory the CMake build reads (when tests, benchmarks and fuzzers are
    # off) must be among them.
    copied = set()
    for w, r in stages["build"]["instrs"]:
        if w == "COPY" and "--from=" not in r:
            copied.update(s.rstrip("/").split("/")[0] for s in r.split()[:-1] if not s.startswith("--"))
    if "." not in copied:
        for d in build_source_dirs():
            if d not in copied:
                errors.append(f"the build stage does not COPY {d}/, which the CMake build reads")

    # Every COPY source outside --from must exist in the build context.
    for name in order:
        for w, r in stages[name]["instrs"]:
            if w == "COPY" and "--from=" not in r:
                srcs = [s for s in r.split() if not s.startswith("--")][:-1]
                for s in srcs:
                    if s != "." and not os.path.exists(os.path.join(ROOT, s)):
                        errors.append(f"COPY {s}: no such file in the repository")

    # The runtime libraries: every package owning a library halo links.
    apt = " ".join(r for w, r in stages["base"]["instrs"] if w == "RUN") if "base" in stages else ""
    listed = set(re.findall(r"(?<![\w.-])([a-z0-9][a-z0-9.+-]+[a-z0-9])(?![\w.-])", apt))
    pkgs = needed_packages()
    if pkgs is not None:
        for lib, owners in pkgs.items():
            if lib.startswith(("libc.so", "libm.so", "ld-linux", "libpthread", "libdl.so", "librt.so")):
                continue  # libc6, in every Debian image
            if owners and not listed.intersection(owners):
                errors.append(f"{lib} (Debian {', '.join(owners)}) is not installed in the runtime stage")

    patterns = [l.strip() for l in dockerignore.splitlines() if l.strip() and not l.startswith("#")]
    for need, ok in (("build*/", lambda p: p.rstrip("/") in ("build*", "/build*")),
                     (".git", lambda p: p.rstrip("/") in (".git", "/.git")),
                     ("tests/js/node_modules", lambda p: p.rstrip("/") in ("tests/js/node_modules", "**/node_modules"))):
        if not any(ok(p) for p in patterns):
            errors.append(f".dockerignore does not exclude {need}")
    return errors


def check_serve_script(script_text):
    """Runs the SageMaker `serve` script with a stub halo that prints its
    arguments: `serve` and `serve serve` must exec `halo serve --sagemaker`."""
    errors = []
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "serve")
        with open(script, "w") as f:
            f.write(script_text)
        os.chmod(script, 0o755)
        stub = os.path.join(d, "halo")
        with open(stub, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
        os.chmod(stub, 0o755)
        env = dict(os.environ, PATH=d + ":/usr/bin:/bin")
        for argv, want in (([], ["serve", "--sagemaker"]),
                           (["serve"], ["serve", "--sagemaker"]),
                           (["--log-level", "warn"], None)):
            out = subprocess.run(["/bin/sh", script, *argv], capture_output=True, text=True, env=env, timeout=30)
            got = out.stdout.splitlines()
            if want is None:
                want = ["serve", "--sagemaker", *argv]
            if out.returncode != 0 or got != want:
                errors.append(f"`serve {' '.join(argv)}` ran `halo {' '.join(got)}` (exit {out.returncode}), "
                              f"not `halo {' '.join(want)}`")
    return errors


# --- Kubernetes objects --------------------------------------------------------

def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def pod_specs(node, labels=None, where=""):
    """(pod spec, pod labels, where) for every pod template inside an object:
    Deployments, KServe's LLMInferenceService template and predictor, ..."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node, labels or {}, where
        for k, v in node.items():
            if k == "template" and isinstance(v, dict) and isinstance(v.get("spec"), dict):
                yield from pod_specs(v["spec"], (v.get("metadata") or {}).get("labels"), f"{where}.template.spec")
            elif k != "containers":
                yield from pod_specs(v, None, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from pod_specs(v, None, f"{where}[{i}]")


def doc_name(doc):
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def quantity(v):
    try:
        return int(str(v))
    except ValueError:
        return None


def resolve_port(ref, container):
    """A probe's or Service's port (number or name) as a number in container."""
    if isinstance(ref, int):
        return ref
    for p in container.get("ports") or []:
        if p.get("name") == ref:
            return p.get("containerPort")
    return None


def subst_env(token, env_names, sample):
    def repl(m):
        return sample.get(m.group(1), "x")
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", repl, token)


class HaloContainer:
    """A container that runs halo, its command line parsed."""

    def __init__(self, doc, pod, labels, container, init, image_cfg):
        self.doc, self.pod, self.labels, self.c, self.init = doc, pod, labels, container, init
        self.where = f"{doc_name(doc)} container {container.get('name')}"
        self.problems = []
        argv = list(container.get("command") or [])
        if not argv:
            argv = list(image_cfg["ENTRYPOINT"] or [])
            argv += list(container.get("args") if container.get("args") is not None else image_cfg["CMD"] or [])
        else:
            argv += list(container.get("args") or [])
        self.argv = [str(a) for a in argv]
        if os.path.basename(self.argv[0]) == "serve":  # the SageMaker entry script
            rest = self.argv[1:]
            if rest[:1] == ["serve"]:
                rest = rest[1:]
            self.argv = ["halo", "serve", "--sagemaker", *rest]
        self.env = {e["name"]: e for e in container.get("env") or []}
        # $(VAR) the kubelet cannot expand stays literal: a silent bug.
        for t in self.argv:
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", t):
                if var not in self.env:
                    self.problems.append(f"$({var}) is used but not defined in the container's env")
        globals_ = halo_help()
        i = 1
        self.global_opts = []
        while i < len(self.argv) and self.argv[i].startswith("-"):
            name, eq, _ = self.argv[i].partition("=")
            spec = globals_.get(name)
            if spec is None:
                self.problems.append(f"unknown global flag {name}")
            self.global_opts.append(self.argv[i])
            i += 1
            if spec and spec.takes_value and not eq and i < len(self.argv):
                self.global_opts.append(self.argv[i])
                i += 1
        self.sub = self.argv[i] if i < len(self.argv) else None
        self.tokens = self.argv[i + 1:]
        flags = halo_help(self.sub) if self.sub in ("serve", "compile", "generate") else {}
        if not flags:
            self.problems.append(f"runs `halo {self.sub}`, which this test does not know")
        self.opts, self.pos, problems = parse_argv(self.tokens, flags)
        self.problems += problems

    @staticmethod
    def is_halo(container, image_cfg):
        cmd = container.get("command") or []
        if cmd:
            return os.path.basename(str(cmd[0])) in ("halo", "serve") and (
                os.path.basename(str(cmd[0])) == "halo" or "halo" in str(container.get("image", "")))
        image = str(container.get("image", "")).split("/")[-1]
        return image.startswith("halo:") or image == "halo"

    def value(self, name, default=None):
        return opt(self.opts, name, default)


def halo_containers(docs, image_cfg):
    for doc in docs:
        for pod, labels, _ in pod_specs(doc):
            for init, key in ((False, "containers"), (True, "initContainers")):
                for c in pod.get(key) or []:
                    if HaloContainer.is_halo(c, image_cfg):
                        yield HaloContainer(doc, pod, labels, c, init, image_cfg)


def runtime_image_config():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        stages, _, _ = dockerfile_stages(parse_dockerfile(f.read()))
    return stage_config(stages, "runtime")


def check_config_run(h):
    """`halo serve --check-config` with the container's arguments: flags,
    values and --kv-events-config are validated without loading anything.
    The model (an in-image path, a download) becomes the repository's
    embedded one: nothing here may touch the network."""
    out_tokens = [EMBEDDED_MODEL if t in h.pos else subst_env(t, h.env, SAMPLE_ENV) for t in h.tokens]
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "HF_HOME": os.path.join(home, "hf"), "HF_HUB_OFFLINE": "1"}
        if "HALO_PLUGIN_PATH" in os.environ:
            env["HALO_PLUGIN_PATH"] = os.environ["HALO_PLUGIN_PATH"]
        cmd = [HALO_BIN, *h.global_opts, "serve", *out_tokens, "--check-config"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    text = r.stdout + r.stderr
    if r.returncode != 0 or "INVALID" in text or re.search(r"^error:", text, re.M):
        tail = "; ".join(l for l in text.splitlines() if "error" in l.lower() or "INVALID" in l)[:500]
        return [f"`halo serve --check-config` refuses its arguments: {tail or text[-300:]}"]
    return []


def check_serve_container(h, expect_resource=None):
    """The pod-level checks of one `halo serve` container."""
    errors = list(h.problems)
    serve_help = halo_help("serve")
    sagemaker = has(h.opts, "--sagemaker")
    port = int(h.value("--port", "8080" if sagemaker else serve_help["--port"].default))
    host = h.value("--host", "0.0.0.0" if sagemaker else serve_help["--host"].default)
    if host not in ("0.0.0.0", "::"):
        errors.append(f"--host {host}: other pods cannot reach it")
    ports = [p.get("containerPort") for p in h.c.get("ports") or []]
    if port not in ports:
        errors.append(f"halo listens on {port} (--port) but the containerPorts are {ports}")
    for probe, path in (("readinessProbe", "/health"), ("startupProbe", "/health"),
                        ("livenessProbe", "/v2/health/live")):
        p = h.c.get(probe)
        if not p:
            errors.append(f"no {probe}")
            continue
        get = p.get("httpGet") or {}
        if get.get("path") != path:
            errors.append(f"{probe} GETs {get.get('path')}, not {path}")
        if resolve_port(get.get("port"), h.c) != port:
            errors.append(f"{probe} port {get.get('port')} is not halo's port {port}")
    try:
        delay = float(h.value("--shutdown-delay", serve_help["--shutdown-delay"].default or 0))
        timeout = float(h.value("--shutdown-timeout", serve_help["--shutdown-timeout"].default or 30))
    except ValueError:
        delay = timeout = None
        errors.append("--shutdown-delay / --shutdown-timeout is not a number")
    grace = h.pod.get("terminationGracePeriodSeconds", 30)
    if delay is not None and not grace > delay + timeout:
        errors.append(f"terminationGracePeriodSeconds {grace} <= --shutdown-delay {delay:g} + "
                      f"--shutdown-timeout {timeout:g}: the kubelet kills the drain")

    # The device and what the pod asks for.
    device = h.value("--device", "cpu")
    limits = (h.c.get("resources") or {}).get("limits") or {}
    requests = (h.c.get("resources") or {}).get("requests") or {}
    extended = {k: quantity(v) for k, v in limits.items() if k not in PLAIN_RESOURCES and not k.startswith("hugepages-")}
    for k, v in requests.items():
        if k in extended and quantity(v) != extended[k]:
            errors.append(f"{k}: request {v} differs from limit {extended[k]} (extended resources need equal)")
        if k not in PLAIN_RESOURCES and k not in extended:
            errors.append(f"{k} is requested but not limited")
    if device == "cpu" and extended:
        errors.append(f"--device cpu but the pod asks for {sorted(extended)}")
    elif device == "cuda" and not extended.get("nvidia.com/gpu"):
        errors.append(f"--device cuda but no nvidia.com/gpu limit ({sorted(extended) or 'none'})")
    elif device == "rbln":
        npus = {k: v for k, v in extended.items() if k != "nvidia.com/gpu"}
        if not npus or "nvidia.com/gpu" in extended:
            errors.append(f"--device rbln needs an NPU resource and no GPU, got {sorted(extended) or 'none'}")
    if expect_resource:
        name, count = expect_resource
        if extended.get(name) != count:
            errors.append(f"expected {count} x {name}, the pod asks for {extended}")
    tp = h.value("--tensor-parallel-size")
    if tp and device == "cuda" and str(extended.get("nvidia.com/gpu")) != str(tp):
        errors.append(f"--tensor-parallel-size {tp} but {extended.get('nvidia.com/gpu')} GPU(s)")

    # rbln serves what an init container compiled, for as many chips as it has.
    if device == "rbln":
        compiles = [c for c in h.pod.get("_halo_init", []) if c.sub == "compile"]
        model = h.pos[0] if h.pos else None
        if not compiles:
            errors.append("--device rbln without a `halo compile` init container")
        for c in compiles:
            if c.value("--output", c.value("-o")) != model:
                errors.append(f"the init container compiles to {c.value('--output')} but halo serves {model}")
            npu = sum(v for k, v in extended.items() if k != "nvidia.com/gpu" and v)
            if str(c.value("--tensor-parallel-size", "1")) != str(npu):
                errors.append(f"compiled for --tensor-parallel-size {c.value('--tensor-parallel-size', '1')} "
                              f"but the pod has {npu} NPU(s)")

    # KV events for prefix-aware routers.
    kv = h.value("--kv-events-config")
    if kv is not None:
        try:
            cfg = json.loads(kv)
        except ValueError as e:
            cfg = None
            errors.append(f"--kv-events-config is not JSON: {e}")
        if cfg is not None:
            served = h.value("--served-model-name")
            if cfg.get("enable_kv_cache_events") is not True:
                errors.append("--kv-events-config without enable_kv_cache_events: true")
            if not has(h.opts, "--enable-prefix-caching"):
                errors.append("--kv-events-config without --enable-prefix-caching")
            topic = str(cfg.get("topic", ""))
            m = re.match(r"^kv@\$\(POD_IP\)(?::\$\(POD_PORT\))?@(.+)$", topic)
            if not m:
                errors.append(f"topic {topic!r} is not kv@$(POD_IP)@<model>")
            elif m.group(1) not in (served, "{model}"):
                errors.append(f"topic names model {m.group(1)} but halo serves {served}")
            pod_ip = h.env.get("POD_IP", {})
            if ((pod_ip.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != "status.podIP":
                errors.append("POD_IP is not the downward API's status.podIP")
            if "value" not in h.env.get("PYTHONHASHSEED", {}):
                errors.append("no PYTHONHASHSEED: the router's hashSeed cannot match")
    errors += check_config_run(h)
    return [f"{h.where}: {e}" for e in errors]


def check_compile_container(h):
    return [f"{h.where}: {e}" for e in h.problems]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_bundle(docs, expect_resource=None, image_cfg=None):
    """Every check over a set of objects deployed together."""
    image_cfg = image_cfg or runtime_image_config()
    errors = []
    for d in docs:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind"):
            errors.append(f"a document without apiVersion/kind: {str(d)[:80]}")
        elif not (d.get("metadata") or {}).get("name"):
            errors.append(f"{d.get('kind')} without metadata.name")
    halos = list(halo_containers(docs, image_cfg))
    for h in halos:
        if h.init:
            h.pod.setdefault("_halo_init", []).append(h)
    serving = [h for h in halos if not h.init and h.sub == "serve"]
    for h in halos:
        if h.init or h.sub != "serve":
            errors += check_compile_container(h)
    for h in serving:
        errors += check_serve_container(h, expect_resource)
    for h in halos:
        h.pod.pop("_halo_init", None)

    pods = [(doc, pod, labels) for doc in docs for pod, labels, _ in pod_specs(doc)]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)

    def serve_port(h):
        return int(h.value("--port", "8080" if has(h.opts, "--sagemaker") else "8000"))

    # Services: select pods, and target a port those pods have.
    for svc in by_kind.get("Service", []):
        sel = (svc.get("spec") or {}).get("selector") or {}
        matched = [(doc, pod) for doc, pod, labels in pods if selects(sel, labels)]
        if not matched:
            errors.append(f"{doc_name(svc)} selects no pod ({sel})")
        for doc, pod in matched:
            for p in (svc.get("spec") or {}).get("ports") or []:
                target = p.get("targetPort", p.get("port"))
                if not any(resolve_port(target, c) in [q.get("containerPort") for q in c.get("ports") or []]
                           for c in pod.get("containers") or []):
                    errors.append(f"{doc_name(svc)} port {p.get('name')}: targetPort {target} is no port of {doc_name(doc)}")
            for h in serving:
                if h.pod is pod:
                    if not any(resolve_port(p.get("targetPort", p.get("port")), h.c) == serve_port(h)
                               for p in (svc.get("spec") or {}).get("ports") or []):
                        errors.append(f"{doc_name(svc)} does not target halo's port {serve_port(h)} in {doc_name(doc)}")

    # PodMonitors scrape a named port of the halo pods.
    for pm in by_kind.get("PodMonitor", []):
        sel = ((pm.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        targets = [h for h in serving if selects(sel, h.labels)]
        if not targets:
            errors.append(f"{doc_name(pm)} selects no halo pod")
        for ep in (pm.get("spec") or {}).get("podMetricsEndpoints") or []:
            for h in targets:
                if resolve_port(ep.get("port"), h.c) != serve_port(h) or ep.get("path", "/metrics") != "/metrics":
                    errors.append(f"{doc_name(pm)} scrapes {ep.get('port')}{ep.get('path')}, not halo's /metrics")

    # InferencePools, their endpoint pickers, and the routes to them.
    pools = {(p.get("metadata") or {}).get("name"): p for p in by_kind.get("InferencePool", [])}
    services = {(s.get("metadata") or {}).get("name"): s for s in by_kind.get("Service", [])}
    for name, pool in pools.items():
        spec = pool.get("spec") or {}
        if pool.get("apiVersion") != "inference.networking.k8s.io/v1":
            errors.append(f"InferencePool/{name}: apiVersion {pool.get('apiVersion')}, not inference.networking.k8s.io/v1")
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        members = [h for h in serving if selects(sel, h.labels)]
        if not members:
            errors.append(f"InferencePool/{name} selects no halo pod ({sel})")
        numbers = [p.get("number") for p in spec.get("targetPorts") or []]
        for h in members:
            if serve_port(h) not in numbers:
                errors.append(f"InferencePool/{name} targetPorts {numbers} miss halo's port {serve_port(h)} ({h.where})")
        ref = spec.get("endpointPickerRef") or {}
        epp_svc = services.get(ref.get("name"))
        epp_port = (ref.get("port") or {}).get("number")
        if epp_svc is None:
            errors.append(f"InferencePool/{name}: endpointPickerRef {ref.get('name')} is no Service here")
            continue
        if epp_port not in [p.get("port") for p in (epp_svc.get("spec") or {}).get("ports") or []]:
            errors.append(f"InferencePool/{name}: the EPP Service has no port {epp_port}")
        epp_pods = [(doc, pod) for doc, pod, labels in pods
                    if selects((epp_svc.get("spec") or {}).get("selector") or {}, labels)]
        for doc, pod in epp_pods:
            for c in pod.get("containers") or []:
                args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
                if f"--pool-name={name}" not in args and not any(
                        a == "--pool-name" and args[i + 1] == name for i, a in enumerate(args[:-1])):
                    errors.append(f"{doc_name(doc)}: the endpoint picker of InferencePool/{name} has no --pool-name={name}")
                errors += check_epp(doc, pod, c, args, members, services, docs)
    for route in by_kind.get("HTTPRoute", []):
        for rule in (route.get("spec") or {}).get("rules") or []:
            for b in rule.get("backendRefs") or []:
                if b.get("kind") == "InferencePool":
                    if b.get("group") != "inference.networking.k8s.io":
                        errors.append(f"{doc_name(route)}: backendRef group {b.get('group')}")
                    if b.get("name") not in pools:
                        errors.append(f"{doc_name(route)}: InferencePool {b.get('name')} is not defined here")
    return errors


def check_epp(doc, pod, c, args, members, services, docs):
    """The endpoint picker's configuration against the halo pods it routes to."""
    errors = []
    where = doc_name(doc)

    def arg(name):
        for i, a in enumerate(args):
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
            if a == name and i + 1 < len(args):
                return args[i + 1]
        return None

    # Metric names the EPP reads must be ones halo exports.
    with open(os.path.join(ROOT, "core", "engine", "metrics.cpp")) as f:
        metrics_src = f.read()
    for a in args:
        m = re.match(r"^--[a-z-]+-metric=(.+)$", a)
        if m and f'"{m.group(1).split("{")[0]}"' not in metrics_src:
            errors.append(f"{where}: {a}: halo exports no such metric")

    path = arg("--config-file")
    if not path:
        return errors
    config = None
    for vm in c.get("volumeMounts") or []:
        if os.path.dirname(path) == vm.get("mountPath").rstrip("/"):
            vol = next((v for v in pod.get("volumes") or [] if v.get("name") == vm.get("name")), {})
            cm_name = (vol.get("configMap") or {}).get("name")
            cm = next((d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name), None)
            if cm and os.path.basename(path) in (cm.get("data") or {}):
                config = yaml.safe_load(cm["data"][os.path.basename(path)])
    if config is None:
        return errors + [f"{where}: --config-file {path} is no key of a mounted ConfigMap here"]
    if config.get("kind") != "EndpointPickerConfig":
        errors.append(f"{where}: {path} is not an EndpointPickerConfig")
    plugins = config.get("plugins") or []
    declared = {p.get("name") or p.get("type") for p in plugins}
    for prof in config.get("schedulingProfiles") or []:
        for p in prof.get("plugins") or []:
            if p.get("pluginRef") not in declared:
                errors.append(f"{where}: profile {prof.get('name')} refers to undeclared plugin {p.get('pluginRef')}")
    for p in plugins:
        if p.get("type") != "precise-prefix-cache-scorer":
            continue
        params = p.get("parameters") or {}
        tp = params.get("tokenProcessorConfig") or (params.get("indexerConfig") or {}).get("tokenProcessorConfig") or {}
        model = ((params.get("indexerConfig") or {}).get("tokenizersPoolConfig") or {}).get("modelName")
        zmq = (params.get("kvEventsConfig") or {}).get("zmqEndpoint", "")
        zport = zmq.rsplit(":", 1)[-1]
        if zport not in [str(q.get("containerPort")) for q in c.get("ports") or []]:
            errors.append(f"{where}: binds {zmq} but the container declares no port {zport}")
        for h in members:
            bs = h.value("--block-size")
            if bs is None or str(tp.get("blockSize")) != str(bs):
                errors.append(f"{where}: blockSize {tp.get('blockSize')} but {h.where} has --block-size {bs}")
            seed = h.env.get("PYTHONHASHSEED", {}).get("value")
            if str(tp.get("hashSeed")) != str(seed):
                errors.append(f"{where}: hashSeed {tp.get('hashSeed')} but {h.where} has PYTHONHASHSEED {seed}")
            if model != h.value("--served-model-name"):
                errors.append(f"{where}: tokenizes for {model} but {h.where} serves {h.value('--served-model-name')}")
            kv = h.value("--kv-events-config")
            if kv is None:
                errors.append(f"{h.where}: in a precise prefix-cache pool without --kv-events-config")
                continue
            try:
                endpoint = json.loads(kv).get("endpoint", "")
            except ValueError:
                continue
            m = re.match(r"^tcp://([^:/]+):(\d+)$", endpoint)
            if not m or "*" in endpoint:
                continue  # bound in the pod: the scheduler discovers pods instead
            host, port = m.groups()
            svc = services.get(host.split(".")[0])
            if svc is None:
                errors.append(f"{h.where}: publishes to {host}, which is no Service here")
            elif port != zport or int(port) not in [q.get("port") for q in (svc.get("spec") or {}).get("ports") or []]:
                errors.append(f"{h.where}: publishes to port {port}; the scheduler binds {zport}")
            elif not selects((svc.get("spec") or {}).get("selector") or {}, (doc.get("spec", {}).get("template", {})
                                                                          .get("metadata", {}).get("labels") or {})):
                errors.append(f"{h.where}: Service {host.split('.')[0]} is not the scheduler's")
            if host.count(".") and not host.endswith(".$(NAMESPACE).svc.cluster.local"):
                errors.append(f"{h.where}: {host}: use <service>.$(NAMESPACE).svc.cluster.local")
    return errors


# --- kustomize, the subset the overlays use ---------------------------------------

def smp(base, patch):
    """A strategic merge patch as kustomize applies one to these objects:
    maps merge, lists of named items merge by name, other lists replace."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = smp(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch and
            all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(p) for p in patch]
        names = {p["name"] for p in patch}
        for i, p in enumerate(out):
            old = next((b for b in base if b["name"] == p["name"]), None)
            if old is not None:
                out[i] = smp(old, p)
        return out + [copy.deepcopy(b) for b in base if b["name"] not in names]
    return copy.deepcopy(patch)


def kustomize(path, used):
    kfile = os.path.join(path, "kustomization.yaml")
    used.add(kfile)
    with open(kfile) as f:
        k = yaml.safe_load(f)
    docs = []
    for r in k.get("resources") or []:
        p = os.path.normpath(os.path.join(path, r))
        if os.path.isdir(p):
            docs += kustomize(p, used)
        else:
            used.add(p)
            docs += load_docs(p)
    for patch in k.get("patches") or []:
        p = os.path.join(path, patch["path"])
        used.add(p)
        for pd in load_docs(p):
            for i, d in enumerate(docs):
                if d.get("kind") == pd.get("kind") and d["metadata"]["name"] == pd["metadata"]["name"]:
                    docs[i] = smp(d, pd)
    for img in k.get("images") or []:
        for d in docs:
            for pod, _, _ in pod_specs(d):
                for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
                    name, _, tag = str(c.get("image", "")).partition(":")
                    if name == img["name"]:
                        c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    return docs


def kubectl_kustomize(path):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    r = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"kubectl kustomize {rel(path)}: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


# --- the Helm chart ------------------------------------------------------------

class Renderer:
    """render_chart.go built once into a temporary directory."""
    binary = None
    skip_reason = None
    tmp = None

    @classmethod
    def get(cls):
        if cls.binary or cls.skip_reason:
            return cls.binary
        go = shutil.which("go")
        missing = [p for p in ("github.com/Masterminds/sprig", "gopkg.in/yaml.v3")
                   if not os.path.isdir(os.path.join(GOPATH, "src", p))]
        if not go:
            cls.skip_reason = "go not found (apt-get install golang-go): the chart is not rendered"
        elif missing:
            cls.skip_reason = (f"{', '.join(missing)} missing under {GOPATH} (apt-get install "
                               "golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev): the chart is not rendered")
        if cls.skip_reason:
            return None
        cls.tmp = tempfile.mkdtemp(prefix="halo-render-chart-")
        atexit.register(shutil.rmtree, cls.tmp, True)
        env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=os.path.join(cls.tmp, "cache"),
                   GOFLAGS="")
        out = os.path.join(cls.tmp, "render_chart")
        r = subprocess.run([go, "build", "-o", out, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     "render_chart.go")],
                           capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            raise AssertionError(f"building render_chart.go failed:\n{r.stderr}")
        cls.binary = out
        return out

    @classmethod
    def render(cls, *args, chart=CHART):
        b = cls.get()
        r = subprocess.run([b, chart, *args], capture_output=True, text=True, timeout=120)
        return r.returncode, [d for d in yaml.safe_load_all(r.stdout) if d] if r.returncode == 0 else [], r.stderr


# --- the tests -------------------------------------------------------------------

def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


class Setup(unittest.TestCase):
    def test_halo_help_parses(self):
        self.assertTrue(os.access(HALO_BIN, os.X_OK), f"HALO_BIN={HALO_BIN} is not an executable")
        serve = halo_help("serve")
        for name in ("--port", "--host", "--shutdown-delay", "--shutdown-timeout", "--kv-events-config",
                     "--enable-prefix-caching", "--sagemaker", "--served-model-name", "--device"):
            self.assertIn(name, serve, f"`halo serve --help` does not list {name}")
        self.assertEqual(serve["--port"].default, "8000")
        self.assertTrue(serve["--enforce-eager"].compat)
        self.assertFalse(serve["--enable-prefix-caching"].takes_value)
        self.assertTrue(serve["--served-model-name"].multi)


class Dockerfile(unittest.TestCase):
    def test_dockerfile(self):
        errors = check_dockerfile(read("Dockerfile"), read(".dockerignore"), read("deploy/sagemaker/serve"))
        self.assertEqual([], errors)


class Manifests(unittest.TestCase):
    """Every YAML file under deploy/ (but the chart's templates), in the sets
    that are deployed together."""

    @classmethod
    def setUpClass(cls):
        cls.used = set()
        base = kustomize(os.path.join(DEPLOY, "kubernetes", "base"), cls.used)
        cls.bundles = {}
        for device in ("cpu", "cuda", "rbln"):
            cls.bundles[f"kubernetes/overlays/{device}"] = kustomize(
                os.path.join(DEPLOY, "kubernetes", "overlays", device), cls.used)
        pm = os.path.join(DEPLOY, "kubernetes", "monitoring", "podmonitor.yaml")
        cls.used.add(pm)
        cls.bundles["kubernetes/monitoring + base"] = base + load_docs(pm)
        gaie = os.path.join(DEPLOY, "gateway-api-inference-extension")
        docs = []
        for f in ("inferencepool.yaml", "httproute.yaml"):
            cls.used.add(os.path.join(gaie, f))
            docs += load_docs(os.path.join(gaie, f))
        cls.bundles["gateway-api-inference-extension + kubernetes/base"] = base + docs
        docs = []
        for f in ("halo.yaml", "scheduler.yaml"):
            cls.used.add(os.path.join(gaie, "precise-prefix-cache", f))
            docs += load_docs(os.path.join(gaie, "precise-prefix-cache", f))
        cls.bundles["gateway-api-inference-extension/precise-prefix-cache"] = docs
        for f in ("llminferenceservice.yaml", "inferenceservice.yaml"):
            p = os.path.join(DEPLOY, "kserve", f)
            cls.used.add(p)
            cls.bundles[f"kserve/{f}"] = load_docs(p)

    def test_every_yaml_parses_and_is_checked(self):
        skip_dir = os.path.join(CHART, "templates")
        for dirpath, _, files in os.walk(DEPLOY):
            for f in files:
                if not f.endswith((".yaml", ".yml")):
                    continue
                p = os.path.join(dirpath, f)
                with self.subTest(file=rel(p)):
                    if dirpath.startswith(skip_dir):
                        continue  # Go templates; rendered by the Chart tests
                    load_docs(p)  # raises on invalid YAML
                    if dirpath != CHART:
                        self.assertIn(p, self.used, f"{rel(p)} is in no checked set: add it to Manifests.setUpClass")

    def test_bundles(self):
        for name, docs in self.bundles.items():
            with self.subTest(bundle=name):
                expect = {"kubernetes/overlays/cuda": ("nvidia.com/gpu", 1),
                          "kubernetes/overlays/rbln": ("rebellions.ai/ATOM", 1)}.get(name)
                self.assertEqual([], check_bundle(copy.deepcopy(docs), expect))

    def test_every_device_overlay_runs_halo(self):
        for device in ("cpu", "cuda", "rbln"):
            docs = self.bundles[f"kubernetes/overlays/{device}"]
            hs = [h for h in halo_containers(docs, runtime_image_config()) if h.sub == "serve"]
            self.assertEqual(1, len(hs), device)
            self.assertEqual(device, hs[0].value("--device", "cpu"))

    def test_overlays_with_kubectl(self):
        if not shutil.which("kubectl"):
            self.skipTest("kubectl not found: overlays rendered by this test's own kustomize subset only")
        for device in ("cpu", "cuda", "rbln"):
            with self.subTest(device=device):
                docs = kubectl_kustomize(os.path.join(DEPLOY, "kubernetes", "overlays", device))
                expect = {"cuda": ("nvidia.com/gpu", 1), "rbln": ("rebellions.ai/ATOM", 1)}.get(device)
                self.assertEqual([], check_bundle(docs, expect))
                ours = self.bundles[f"kubernetes/overlays/{device}"]
                hk = [h.argv for h in halo_containers(docs, runtime_image_config())]
                ho = [h.argv for h in halo_containers(ours, runtime_image_config())]
                self.assertEqual(sorted(hk), sorted(ho), "kubectl and this test's kustomize disagree")


class ChartFiles(unittest.TestCase):
    def test_chart_metadata(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            meta = yaml.safe_load(f)
        self.assertEqual("v2", meta["apiVersion"])
        self.assertEqual("halo", meta["name"])
        for f in ("values.yaml", "templates/_helpers.tpl", "templates/deployment.yaml", "templates/service.yaml"):
            self.assertTrue(os.path.exists(os.path.join(CHART, f)), f)


class Chart(unittest.TestCase):
    """The chart rendered as `helm template` would, with several values."""

    def setUp(self):
        if not Renderer.get():
            self.skipTest(Renderer.skip_reason)

    def render(self, *args):
        rc, docs, err = Renderer.render("--name", "halo", "--namespace", "llm", *args)
        self.assertEqual(0, rc, err)
        return docs

    def test_renders(self):
        cases = {
            "default": ([], None),
            "cuda": (["--set", "device.type=cuda", "--set", "model=Qwen/Qwen3-0.6B"], ("nvidia.com/gpu", 1)),
            "cuda x2": (["--set", "device.type=cuda,device.count=2"], ("nvidia.com/gpu", 2)),
            "rbln": (["--set", "device.type=rbln"], ("rebellions.ai/ATOM", 1)),
            "rbln, own resource": (["--set", "device.type=rbln,device.resourceName=example.com/npu,device.count=2"],
                                   ("example.com/npu", 2)),
            "kv events": (["--set", "kvEvents.enabled=true", "--set", "servedModelName=Qwen/Qwen3-0.6B",
                           "--set", "kvEvents.replayEndpoint=tcp://*:5558"], None),
            "extra args": (["--set", "extraArgs={--max-model-len=256,--max-num-seqs=8}",
                            "--set", "shutdown.delaySeconds=30,shutdown.timeoutSeconds=120"], None),
            "podmonitor": (["--set", "metrics.podMonitor.enabled=true", "--set", "port=9000"], None),
        }
        for name, (args, expect) in cases.items():
            with self.subTest(case=name):
                docs = self.render(*args)
                self.assertEqual([], check_bundle(docs, expect))
                hs = [h for h in halo_containers(docs, runtime_image_config()) if h.sub == "serve"]
                self.assertEqual(1, len(hs))
                if name == "kv events":
                    cfg = json.loads(hs[0].value("--kv-events-config"))
                    self.assertEqual("kv@$(POD_IP)@Qwen/Qwen3-0.6B", cfg["topic"])
                    self.assertEqual("tcp://*:5558", cfg["replay_endpoint"])
                if name == "extra args":
                    self.assertEqual(["--max-model-len=256", "--max-num-seqs=8"], hs[0].tokens[-2:])
                    self.assertEqual(170, hs[0].pod["terminationGracePeriodSeconds"])
                if name == "podmonitor":
                    self.assertIn("PodMonitor", [d["kind"] for d in docs])

    def test_values_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump({"device": {"type": "cuda"}, "replicaCount": 3, "image": {"tag": "dev"}}, f)
            f.flush()
            docs = self.render("-f", f.name)
        dep = next(d for d in docs if d["kind"] == "Deployment")
        self.assertEqual(3, dep["spec"]["replicas"])
        self.assertEqual("halo:dev", dep["spec"]["template"]["spec"]["containers"][0]["image"])
        self.assertEqual([], check_bundle(docs, ("nvidia.com/gpu", 1)))

    def test_bad_device_is_refused(self):
        rc, _, err = Renderer.render("--set", "device.type=gpu")
        self.assertNotEqual(0, rc)
        self.assertIn("device.type must be cpu, cuda or rbln", err)


class Mutations(unittest.TestCase):
    """Each check must be able to fail: break a copy of a real file and look
    for the complaint."""

    @classmethod
    def setUpClass(cls):
        used = set()
        cls.base = kustomize(os.path.join(DEPLOY, "kubernetes", "base"), used)
        cls.rbln = kustomize(os.path.join(DEPLOY, "kubernetes", "overlays", "rbln"), used)
        gaie = os.path.join(DEPLOY, "gateway-api-inference-extension")
        cls.gaie = cls.base + load_docs(os.path.join(gaie, "inferencepool.yaml")) + \
            load_docs(os.path.join(gaie, "httproute.yaml"))
        cls.precise = load_docs(os.path.join(gaie, "precise-prefix-cache", "halo.yaml")) + \
            load_docs(os.path.join(gaie, "precise-prefix-cache", "scheduler.yaml"))

    @staticmethod
    def halo_of(docs):
        for d in docs:
            if d["kind"] == "Deployment" and d["spec"]["template"]["spec"]["containers"][0]["name"] == "halo":
                return d, d["spec"]["template"]["spec"], d["spec"]["template"]["spec"]["containers"][0]
        raise AssertionError("no halo Deployment")

    def broken(self, docs, mutate, expect, resource=None):
        docs = copy.deepcopy(docs)
        mutate(docs)
        errors = check_bundle(docs, resource)
        self.assertTrue(any(re.search(expect, e) for e in errors),
                        f"expected a problem matching {expect!r}, got {errors}")

    def set_arg(self, docs, old_prefix, new):
        _, _, c = self.halo_of(docs)
        c["args"] = [new if str(a).startswith(old_prefix) else a for a in c["args"]]

    def test_manifest_mutations(self):
        def pod(docs):
            return self.halo_of(docs)[1]

        def ctr(docs):
            return self.halo_of(docs)[2]

        def svc(docs, name):
            return next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == name)

        def cm_config(docs, mutate):
            cm = next(d for d in docs if d["kind"] == "ConfigMap")
            key = next(iter(cm["data"]))
            cfg = yaml.safe_load(cm["data"][key])
            mutate(cfg)
            cm["data"][key] = yaml.safe_dump(cfg)

        def precise_scorer(cfg):
            return next(p for p in cfg["plugins"] if p["type"] == "precise-prefix-cache-scorer")["parameters"]

        cases = [
            ("unknown flag", self.base, lambda d: ctr(d)["args"].append("--no-such-flag=1"), r"unknown flag --no-such-flag"),
            ("compat flag", self.base, lambda d: ctr(d)["args"].append("--enforce-eager"), r"compatibility flags"),
            ("bad value", self.base, lambda d: self.set_arg(d, "--shutdown-delay", "--shutdown-delay=soon"),
             r"check-config"),
            ("port", self.base, lambda d: self.set_arg(d, "--port", "--port=8001"), r"listens on 8001"),
            ("host", self.base, lambda d: self.set_arg(d, "--host", "--host=127.0.0.1"), r"--host 127.0.0.1"),
            ("liveness on /health", self.base,
             lambda d: ctr(d)["livenessProbe"]["httpGet"].update(path="/health"), r"livenessProbe GETs /health"),
            ("readiness port", self.base,
             lambda d: ctr(d)["readinessProbe"]["httpGet"].update(port=9999), r"readinessProbe port 9999"),
            ("no startup probe", self.base, lambda d: ctr(d).pop("startupProbe"), r"no startupProbe"),
            ("grace", self.base, lambda d: pod(d).update(terminationGracePeriodSeconds=70), r"kills the drain"),
            ("gpu on cpu", self.base,
             lambda d: ctr(d)["resources"]["limits"].update({"nvidia.com/gpu": 1}), r"--device cpu but"),
            ("cuda without gpu", self.base, lambda d: ctr(d)["args"].append("--device=cuda"), r"no nvidia.com/gpu"),
            ("undefined env", self.base, lambda d: ctr(d)["env"].pop(0), r"\$\(HALO_THREADS\) is used"),
            ("service port", self.base, lambda d: svc(d, "halo")["spec"]["ports"][0].update(targetPort=8001),
             r"targetPort 8001"),
            ("service selector", self.base,
             lambda d: svc(d, "halo")["spec"]["selector"].update({"app.kubernetes.io/name": "hal0"}), r"selects no pod"),
            ("rbln compile tp", self.rbln,
             lambda d: self.halo_of(d)[1]["initContainers"][0]["args"].__setitem__(4, "--tensor-parallel-size=2"),
             r"compiled for --tensor-parallel-size 2"),
            ("rbln without npu", self.rbln,
             lambda d: [ctr(d)["resources"][k].pop("rebellions.ai/ATOM") for k in ("limits", "requests")],
             r"needs an NPU resource"),
            ("pool port", self.gaie,
             lambda d: next(x for x in d if x["kind"] == "InferencePool")["spec"].update(targetPorts=[{"number": 8001}]),
             r"targetPorts \[8001\]"),
            ("pool selector", self.gaie,
             lambda d: next(x for x in d if x["kind"] == "InferencePool")["spec"]["selector"]["matchLabels"].update(
                 {"app.kubernetes.io/instance": "other"}), r"selects no halo pod"),
            ("pool epp ref", self.gaie,
             lambda d: next(x for x in d if x["kind"] == "InferencePool")["spec"]["endpointPickerRef"].update(
                 port={"number": 9100}), r"EPP Service has no port 9100"),
            ("route", self.gaie,
             lambda d: next(x for x in d if x["kind"] == "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0].update(
                 name="nope"), r"InferencePool nope is not defined"),
            ("epp metric", self.gaie,
             lambda d: next(x for x in d if x["kind"] == "Deployment" and x["metadata"]["name"] == "halo-epp")[
                 "spec"]["template"]["spec"]["containers"][0]["args"].append(
                 "--kv-cache-usage-percentage-metric=vllm:gpu_cache_usage_perc"), r"halo exports no such metric"),
            ("kv topic model", self.precise,
             lambda d: self.set_arg(d, "--kv-events-config", ctr(d)["args"][[str(a).startswith("--kv-events-config")
                                                                             for a in ctr(d)["args"]].index(True)]
                                    .replace("@Qwen/Qwen3-0.6B", "@other")), r"topic names model other"),
            ("kv no prefix caching", self.precise,
             lambda d: ctr(d)["args"].remove("--enable-prefix-caching"), r"without --enable-prefix-caching"),
            ("kv block size", self.precise,
             lambda d: cm_config(d, lambda c: precise_scorer(c)["tokenProcessorConfig"].update(blockSize=64)),
             r"blockSize 64 but"),
            ("kv hash seed", self.precise,
             lambda d: [e.update(value="7") for e in ctr(d)["env"] if e["name"] == "PYTHONHASHSEED"],
             r"hashSeed 42 but .* PYTHONHASHSEED 7"),
            ("kv endpoint", self.precise,
             lambda d: self.set_arg(d, "--kv-events-config", ctr(d)["args"][[str(a).startswith("--kv-events-config")
                                                                             for a in ctr(d)["args"]].index(True)]
                                    .replace(":5557", ":5559")), r"publishes to port 5559"),
            ("kv bad json", self.precise,
             lambda d: self.set_arg(d, "--kv-events-config", '--kv-events-config={"enable_kv_cache_events": true,'),
             r"not JSON"),
            ("kv unknown field", self.precise,
             lambda d: self.set_arg(d, "--kv-events-config",
                                    '--kv-events-config={"enable_kv_cache_events":true,"endpoint":"tcp://*:5557",'
                                    '"topic":"kv@$(POD_IP)@Qwen/Qwen3-0.6B","colour":"red"}'), r"unknown field 'colour'"),
        ]
        for name, docs, mutate, expect in cases:
            with self.subTest(mutation=name):
                self.broken(docs, mutate, expect)
        with self.subTest(mutation="expected resource name"):
            self.broken(self.rbln, lambda d: None, r"expected 1 x example.com/npu", ("example.com/npu", 1))

    def test_dockerfile_mutations(self):
        good = read("Dockerfile"), read(".dockerignore"), read("deploy/sagemaker/serve")
        self.assertEqual([], check_dockerfile(*good))
        cases = [
            ("root user", lambda d, i, s: (d.replace("USER 10001:10001", "USER root"), i, s), r"runs as root"),
            ("named user", lambda d, i, s: (d.replace("USER 10001:10001", "USER halo"), i, s), r"not numeric"),
            ("healthcheck", lambda d, i, s: (d + "HEALTHCHECK CMD curl -f http://localhost:8000/health\n", i, s),
             r"HEALTHCHECK"),
            ("expose", lambda d, i, s: (d.replace("EXPOSE 8000", "EXPOSE 8001"), i, s), r"EXPOSE is \['8001'\]"),
            ("cmd flag", lambda d, i, s: (d.replace('"--port", "8000"', '"--listen-port", "8000"'), i, s),
             r"unknown flag --listen-port"),
            ("cmd host", lambda d, i, s: (d.replace('"--host", "0.0.0.0", ', ""), i, s), r"unreachable"),
            ("shell entrypoint", lambda d, i, s: (d.replace('ENTRYPOINT ["halo"]', "ENTRYPOINT halo"), i, s),
             r"ENTRYPOINT is"),
            ("last stage", lambda d, i, s: (d + "FROM base AS extra\n", i, s), r"last stage"),
            ("base", lambda d, i, s: (d.replace("ARG BASE=debian:12", "ARG BASE=ubuntu:24.04"), i, s),
             r"ARG BASE=debian:12"),
            ("sagemaker entrypoint", lambda d, i, s: (d.replace("ENTRYPOINT []", 'ENTRYPOINT ["halo"]'), i, s),
             r"docker run IMAGE serve"),
            ("serve script", lambda d, i, s: (d, i, s.replace("--sagemaker ", "")), r"not `halo serve --sagemaker`"),
            ("dockerignore", lambda d, i, s: (d, i.replace("build*/", ""), s), r"does not exclude build"),
            ("missing library", lambda d, i, s: (d.replace("libzmq5", ""), i, s), r"libzmq.so.5 .* is not installed"),
            ("no rbln plugin", lambda d, i, s: (d.replace(" halo_plugin_rbln", ""), i, s), r"halo_plugin_rbln target"),
            ("source dir", lambda d, i, s: (d.replace("COPY proto proto\n", ""), i, s), r"does not COPY proto/"),
        ]
        for name, mutate, expect in cases:
            with self.subTest(mutation=name):
                if name == "missing library" and needed_packages() is None:
                    continue
                errors = check_dockerfile(*mutate(*good))
                self.assertTrue(any(re.search(expect, e) for e in errors),
                                f"expected a problem matching {expect!r}, got {errors}")


if __name__ == "__main__":
    unittest.main()
