# The PyTorch baseline beside `run_model --ctx gpu(0)` (docs/benchmarks.md, GPU): torchvision's
# ResNet-18 and ResNet-50 (or the models named on the command line, e.g. vgg16), batch 32, 224x224, float32 (TF32 off, then on), forward in eval mode
# without autograd and forward+backward in training mode (weight gradients, no update), median of
# 10 after 2 warm-ups, synchronized each time, as run_model times its steps.
#
#   python3 tools/torch_resnet_baseline.py [MODEL...]   # on the GPU machine, where torch is installed
import json, sys, time, statistics
import torch, torchvision

def bench(name, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = False
    m = getattr(torchvision.models, name)().cuda()
    x = torch.rand(32, 3, 224, 224, device="cuda") * 0.1
    def timed(step):
        ts = []
        for i in range(12):
            torch.cuda.synchronize(); t = time.perf_counter()
            step(); torch.cuda.synchronize()
            if i >= 2: ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)
    m.eval()
    def fwd():
        with torch.no_grad(): m(x)
    f = timed(fwd)
    m.train()
    def fb():
        m.zero_grad(set_to_none=True)
        m(x).sum().backward()
    fbt = timed(fb)
    return {"model": name, "tf32": tf32, "forward_ms": f, "forward_backward_ms": fbt}

for name in sys.argv[1:] or ["resnet18", "resnet50"]:
    for tf32 in [False, True]:
        print(json.dumps(bench(name, tf32)), flush=True)
