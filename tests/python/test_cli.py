"""`python -m halo` and the server entry points with vLLM's module names."""
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from conftest import free_port


def run_module(env, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_python_m_halo_help(subprocess_env):
    proc = run_module(subprocess_env, "halo", "--help")
    assert proc.returncode == 0, proc.stderr
    for sub in ("serve", "generate", "devices", "compile"):
        assert sub in proc.stdout


def test_python_m_halo_devices(subprocess_env):
    proc = run_module(subprocess_env, "halo", "devices")
    assert proc.returncode == 0, proc.stderr
    assert "cpu" in proc.stdout + proc.stderr


def test_python_m_halo_bad_flag_fails(subprocess_env):
    proc = run_module(subprocess_env, "halo", "generate", "--no-such-flag")
    assert proc.returncode != 0


def test_python_m_halo_generate(subprocess_env, model_dir):
    proc = run_module(subprocess_env, "halo", "generate", model_dir, "--prompt", "Hello",
                      "--temperature", "0", "--max-tokens", "4", "--ignore-eos", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout.splitlines()[0])
    assert len(row["token_ids"]) == 4


def get_json(url, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def wait_until_up(proc, base, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{proc.stderr.read()}")
        try:
            status, models = get_json(base + "/v1/models", timeout=2)
            if status == 200:
                return models
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"server not up in {timeout} s")


def start_server(env, module, *args):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", module, *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("server did not exit within 30 s of SIGINT")


def test_openai_api_server(subprocess_env, model_dir):
    proc, base = start_server(subprocess_env, "halo.entrypoints.openai.api_server",
                              "--model", model_dir, "--max-num-seqs", "4")
    try:
        models = wait_until_up(proc, base)
        names = [m["id"] for m in models["data"]]
        assert names, models
        status, body = get_json(base + "/v1/completions",
                                {"model": names[0], "prompt": "The capital of France is",
                                 "max_tokens": 8, "temperature": 0})
        assert status == 200
        assert body["object"] == "text_completion"
        assert isinstance(body["choices"][0]["text"], str) and body["choices"][0]["text"]

        with urllib.request.urlopen(base + "/health", timeout=5) as resp:
            status = resp.status
        assert status == 200
    finally:
        code = stop(proc)
    assert code in (0, -signal.SIGINT, 128 + signal.SIGINT), code


def test_vllm_generate_api_server(subprocess_env, model_dir):
    proc, base = start_server(subprocess_env, "halo.entrypoints.api_server", "--model", model_dir)
    try:
        wait_until_up(proc, base)
        status, body = get_json(base + "/generate", {"prompt": "Hello, my name is", "max_tokens": 4,
                                                     "temperature": 0})
        assert status == 200
        assert body["text"][0].startswith("Hello, my name is")
    finally:
        stop(proc)


CTRL_C_SCRIPT = r"""
import sys, time
from halo import LLM, SamplingParams
llm = LLM(sys.argv[1], max_num_seqs=8, max_model_len=512)
print("ready", flush=True)
t0 = time.time()
try:
    llm.generate(["a"] * 64, SamplingParams(max_tokens=500, ignore_eos=True), use_tqdm=False)
    print("finished without interruption", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.time() - t0:.1f} s", flush=True)
    # nothing is left running (the engine loop takes the aborts within a step or two)
    deadline = time.time() + 5
    while True:
        m = llm.metrics()
        if m["num_running"] == 0 and m["num_waiting"] == 0:
            break
        assert time.time() < deadline, m
        time.sleep(0.05)
    assert m["request_success"].get("abort") == 64, m
    out = llm.generate("b", SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    print("after:", len(out[0].outputs[0].token_ids), flush=True)
"""


def test_ctrl_c_interrupts_a_long_generate(subprocess_env, model_dir):
    # 64 x 500 tokens take about a minute here; SIGINT must end the batch within seconds.
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, model_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=subprocess_env)
    first = proc.stdout.readline().strip()
    if first != "ready":
        proc.kill()
        raise AssertionError(f"the script did not start: {first!r} {proc.communicate()[1]}")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "interrupted after" in out, out + err
    assert float(out.split("interrupted after ")[1].split(" s")[0]) < 10
    assert "after: 3" in out, out + err
