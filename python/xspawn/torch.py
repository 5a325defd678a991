"""xspawn.torch: PyTorch's gradients reduced over xspawn's shared memory.

``allreduce_hook``: a DistributedDataParallel communication hook that averages each gradient
bucket with xspawn.all_reduce instead of the process group's backend (Gloo over TCP)::

    model = DistributedDataParallel(net)          # init_process_group("gloo") as usual
    model.register_comm_hook(None, xspawn.torch.allreduce_hook)

``optimizer_step(optimizer)``: for loops without DDP, as torch_xla's xm.optimizer_step: the
gradients of the optimizer's parameters averaged across ranks, then optimizer.step().

``all_reduce(tensors, op)``, ``broadcast(tensors, root)``: xspawn's collectives on contiguous CPU
tensors, in place, through the tensors' own memory (no copy).
"""
import torch as _torch

import xspawn as _xs

__all__ = ["allreduce_hook", "optimizer_step", "reduce_gradients", "all_reduce", "broadcast"]

_XSPAWN_TYPES = (_torch.float32, _torch.float64, _torch.int32, _torch.int64)


def _buffer(tensor, call):
    """(a NumPy view sharing the tensor's memory, dtype argument) for xspawn's collectives."""
    if tensor.device.type != "cpu":
        raise _xs.UsageError(f"xspawn.torch.{call}: the tensor is on {tensor.device}; xspawn reduces CPU tensors")
    if not tensor.is_contiguous():
        raise _xs.UsageError(f"xspawn.torch.{call}: the tensor is not contiguous; pass tensor.contiguous()")
    if tensor.dtype == _torch.bfloat16:
        return tensor.detach().view(_torch.int16).numpy(), "bfloat16"
    if tensor.dtype not in _XSPAWN_TYPES:
        raise _xs.UsageError(f"xspawn.torch.{call}: tensors of {tensor.dtype} cannot be reduced; xspawn takes "
                             "float32, float64, int32, int64 and bfloat16 (convert with .to(torch.float32))")
    return tensor.detach().numpy(), None


def _tensors(tensors):
    return [tensors] if isinstance(tensors, _torch.Tensor) else list(tensors)


def all_reduce(tensors, op="sum", *, tag="", timeout=None):
    """xspawn.all_reduce on a CPU tensor or a list of them, in place; returns them."""
    for t in _tensors(tensors):
        data, dtype = _buffer(t, "all_reduce")
        _xs.all_reduce(data, op, tag=tag, timeout=timeout, dtype=dtype)
    return tensors


def broadcast(tensors, root=0, *, tag="", timeout=None):
    """xspawn.broadcast on a CPU tensor or a list of them, in place (e.g. the initial weights)."""
    for t in _tensors(tensors):
        data, dtype = _buffer(t, "broadcast")
        _xs.broadcast(data, root, tag=tag, timeout=timeout, dtype=dtype)
    return tensors


def allreduce_hook(state, bucket):
    """DDP communication hook: the bucket's gradients averaged over xspawn's shared memory, in
    place, as DDP's default hook averages them over the process group. `state` is unused (pass
    None). Every rank's replica gets the same bits (the sum runs in rank order on every rank)."""
    tensor = bucket.buffer()
    data, dtype = _buffer(tensor, "allreduce_hook")
    _xs.all_reduce(data, "mean", dtype=dtype)
    future = _torch.futures.Future()
    future.set_result(tensor)
    return future


def reduce_gradients(optimizer, *, tag=""):
    """The gradients of the optimizer's parameters averaged across ranks, in place (torch_xla:
    xm.reduce_gradients): one all_reduce per type, of the gradients flattened into one buffer."""
    by_type = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                by_type.setdefault(p.grad.dtype, []).append(p.grad)
    for grads in by_type.values():
        flat = _torch.cat([g.detach().reshape(-1) for g in grads])
        all_reduce(flat, "mean", tag=tag)
        at = 0
        for g in grads:
            n = g.numel()
            g.detach().copy_(flat[at:at + n].view_as(g))
            at += n


def optimizer_step(optimizer, barrier=False, optimizer_args=None):
    """reduce_gradients(optimizer), then optimizer.step(**optimizer_args) (torch_xla:
    xm.optimizer_step); barrier=True also waits for every rank after the step. Returns what
    step() returns."""
    reduce_gradients(optimizer)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        _xs.barrier("optimizer_step")
    return loss
