"""The deployment files: the Kubernetes manifests under deploy/ checked
against the Kubernetes API's JSON schemas (kubernetes-validate, bundled
schemas, offline) and against each other and the real binaries' flags; the
Dockerfile linted structurally (Docker itself cannot run here)."""

import copy
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import BIN, ROOT

K8S_VERSION = "1.33.0"
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
DOCKERFILE = ROOT / "Dockerfile"


def docs():
    out = []
    for path in MANIFESTS:
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def find(kind, name):
    hits = [d for _, d in docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, (kind, name)
    return hits[0]


def flags_of(cmd):
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", text))


def arg_flags(args):
    return {a.split("=")[0] for a in args if a.startswith("--")}


def test_manifests_validate_against_the_kubernetes_schema():
    assert {p.name for p in MANIFESTS} >= {"minisgl.yaml", "sglang-router.yaml"}
    for name, d in docs():
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    # The validator is not vacuous: a misspelt field is refused.
    bad = copy.deepcopy(find("Deployment", "minisgl"))
    bad["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_minisgl_deployment_probes_drain_and_flags():
    dep = find("Deployment", "minisgl")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = dict(a.split("=", 1) for a in c["args"])
    port = int(args["--port"])
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": port}
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/live"
    assert c["startupProbe"]["httpGet"]["path"] == "/live"
    # SIGKILL only after preStop plus the server's own drain bound.
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + int(args["--shutdown-timeout-s"])
    # Every flag is one the binary knows.
    assert BIN.exists(), f"{BIN} missing: cargo build -p minisgl-host"
    unknown = arg_flags(c["args"]) - flags_of([str(BIN), "--help"])
    assert not unknown, unknown
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert Path(args["--model"]).parent.as_posix() in mounts
    assert args["--plugin-cache-dir"] in mounts
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svc = find("Service", "minisgl")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


def test_sglang_router_finds_the_replicas():
    router = find("Deployment", "sglang-router")
    pod = router["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = c["args"]
    selector = args[args.index("--selector") + 1]
    key, value = selector.split("=")
    labels = find("Deployment", "minisgl")["spec"]["template"]["metadata"]["labels"]
    assert labels.get(key) == value
    disc_port = next(a.split("=")[1] for a in args if a.startswith("--service-discovery-port="))
    minisgl = find("Deployment", "minisgl")["spec"]["template"]["spec"]["containers"][0]
    assert int(disc_port) == minisgl["ports"][0]["containerPort"]
    # The router may list pods: its service account is bound to that role.
    binding = find("RoleBinding", "sglang-router-pod-reader")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    role = find("Role", binding["roleRef"]["name"])
    assert {"list", "watch"} <= set(role["rules"][0]["verbs"])
    # Flags the pinned router accepts.
    from test_scale_out import router_cmd
    unknown = arg_flags(args) - flags_of([router_cmd("sglang-router"), "launch", "--help"])
    assert not unknown, unknown


def stages():
    """[(name, base, [instructions])] of the Dockerfile."""
    out = []
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
            out.append((m.group(2), m.group(1), []))
        elif out:
            out[-1][2].append((word.upper(), rest.strip()))
    return out


def test_dockerfile_stages_copies_and_entrypoints():
    st = stages()
    names = [s[0] for s in st]
    assert names == ["build", "cuda", "sglang-router", "cpu"], names  # cpu: the default
    seen = set()
    for name, base, instrs in st:
        for word, rest in instrs:
            if word == "COPY":
                parts = rest.split()
                src = [p for p in parts if not p.startswith("--")][:-1]
                if parts[0].startswith("--from="):
                    assert parts[0][7:] in seen, f"{name}: COPY from unknown stage {parts[0]}"
                else:
                    for s in src:
                        assert (ROOT / s).exists(), f"{name}: COPY source {s} missing"
        seen.add(name)
    by = {s[0]: s[2] for s in st}
    for runtime in ("cpu", "cuda"):
        words = [w for w, _ in by[runtime]]
        assert "ENTRYPOINT" in words and "USER" in words, runtime
        copied = [r for w, r in by[runtime] if w == "COPY"]
        assert any("/out/minisgl-host" in r for r in copied), runtime
        cmd = next(r for w, r in by[runtime] if w == "CMD")
        unknown = {f for f in re.findall(r'"(--[a-z-]+)"', cmd)} - flags_of([str(BIN), "--help"])
        assert not unknown, unknown
    # The builder builds packages that exist, and the plugins the image ships.
    build = " ".join(r for w, r in by["build"] if w == "RUN")
    pkgs = re.findall(r"\s-p ([a-z][a-z0-9_-]+)", build)
    assert "minisgl-host" in pkgs, pkgs
    for pkg in pkgs:
        assert any(f'name = "{pkg}"' in p.read_text() for p in ROOT.glob("**/Cargo.toml")
                   if "target" not in p.parts), pkg
    # The CUDA stage has the libraries cudarc loads by name (libcuda comes
    # from the driver through the container toolkit).
    cuda = " ".join(r for _, r in by["cuda"])
    assert "cuda-nvrtc-13-0" in cuda and "libcublas-13-0" in cuda
    assert "NVIDIA_DRIVER_CAPABILITIES=compute" in cuda
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert "target/" in ignore and ".git/" in ignore
