"""scripts/gpu_serve_check.py - the pt2serve step scripts/gpu-check.sh runs on the GPU machine - here on the CPU, with
this build's pt2serve and the protocol's modules taken the way gpu-deps.sh carries them (three files, no
tritonclient), so the rehearsed script cannot rot between the rare runs on a GPU."""

import os
import subprocess
import sys
from pathlib import Path

import tritonclient.grpc

from test_serve import pt2serve_path

ROOT = Path(__file__).resolve().parents[2]


def test_serve_check_answers_equal_eager_over_http_and_grpc(exported, tmp_path):
    path, _, _ = exported("net_dynamic")
    py = tmp_path / "py"
    py.mkdir()
    for name in ("service_pb2.py", "service_pb2_grpc.py", "model_config_pb2.py"):
        (py / name).write_bytes((Path(tritonclient.grpc.__file__).parent / name).read_bytes())
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_serve_check.py"), "--pt2serve", str(pt2serve_path()),
         "--package", str(path), "--ops", os.environ["IDENTITY_CONV_OPS_LIBRARY"], "--device", "cpu",
         "--py", str(py), "--requests", "6"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for transport in ("HTTP", "gRPC"):
        assert f"pt2serve over {transport} on cpu: 6 requests" in result.stdout, result.stdout
    assert "FAILED" not in result.stdout
