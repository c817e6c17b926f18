"""One request to a pt2serve serving the example model (identity_conv_net), with tritonclient, checked against the
eager PyTorch model: scripts/oip_check.py FRAME (--log SERVE_LOG | --http HOST:PORT) [--grpc HOST:PORT].
--log takes the HTTP port from pt2serve's "listening" line. Waits up to a minute for the server to be ready."""

import argparse
import json
import sys
import time

import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from my_ops import models

MODEL = "identity_conv_net"


def wait(ready, what):
    for _ in range(600):
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.1)
    sys.exit(f"error: {what} not ready within a minute")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("frame")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--log")
    where.add_argument("--http")
    p.add_argument("--grpc")
    args = p.parse_args()
    http = args.http
    if args.log:
        def port_from_log():
            nonlocal http
            lines = [json.loads(line) for line in open(args.log) if line.strip()]
            port = next((line["http_port"] for line in lines if line["msg"] == "listening"), None)
            http = f"localhost:{port}" if port else None
            return http is not None
        wait(port_from_log, f"pt2serve (no 'listening' line in {args.log})")
    x = torch.load(args.frame)
    model, _ = models.identity_conv_net()
    with torch.no_grad():
        expected = model(x)

    transports = [(httpclient, http, "HTTP")] + ([(grpcclient, args.grpc, "gRPC")] if args.grpc else [])
    for module, url, name in transports:
        client = module.InferenceServerClient(url)
        wait(lambda: client.is_model_ready(MODEL), f"{MODEL} over {name} at {url}")
        inp = module.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x.numpy())
        y = torch.from_numpy(client.infer(MODEL, [inp]).as_numpy("output_0").copy())
        torch.testing.assert_close(y, expected)
        print(f"pt2serve at {url} ({name}) answered a {list(x.shape)} frame with {list(y.shape)}, "
              "equal to eager PyTorch")


if __name__ == "__main__":
    main()
