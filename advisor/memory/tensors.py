"""Which tensor asked: the failed request matched against the run's own tensor shapes.

A rung of the component ladder (issue 12, rung b), used when frames and quoted calls name nothing:
with the model's shape and the batch and sequence length the log or config states, a request within
a few percent of one tensor's size names that tensor. Assumed values (a batch of 1 nobody stated)
are never matched: a match against a guess would be a guess dressed as a finding.
"""

TOLERANCE = 0.02            # the allocator rounds requests to 2 MiB blocks; sizes print with 2 decimals
MIN_GIB = 0.25              # below it, too many tensors of a run share a size to tell them apart
GIB = 2 ** 30


def candidates(shape, batch, seq, gpu_counts=(1,)):
    """(component, what, bytes) for the tensors of one step whose size a request can name."""
    out = []
    if batch and seq:
        tokens = batch * seq
        for width, name in ((2, "16-bit"), (4, "fp32")):
            out.append(("activations", f"the logits {batch}×{seq}×{shape.vocab} in {name}", tokens * shape.vocab * width))
            out.append(("activations", f"an MLP activation {batch}×{seq}×{shape.intermediate} in {name}",
                        tokens * shape.intermediate * width))
            out.append(("activations", f"the eager attention scores {batch}×{shape.heads}×{seq}² in {name}",
                        batch * shape.heads * seq * seq * width))
    params = shape.params_b * 1e9
    for n in sorted(set(gpu_counts)):
        share = f" over {n} GPUs" if n > 1 else ""
        # an fp32 master copy and each Adam moment are the same size: 4 bytes a parameter
        out.append(("optimizer_states", f"an fp32 state (master copy or Adam moment) of all {shape.params_b:g}B "
                                        f"parameters{share}", params * 4 / n))
    out.append(("weights", f"the embedding {shape.vocab}×{shape.hidden} in 16-bit", shape.vocab * shape.hidden * 2))
    return out


def match(tried_gib, shape, batch=None, seq=None, gpu_counts=(1,)):
    """(component, what) of the tensor the request is, or None when none (or several components) fit.
    `gpu_counts`: the GPU counts a sharded state may be split over (the stated one, or the usual
    ones when the log shows several GPUs without saying how many)."""
    if not tried_gib or tried_gib < MIN_GIB or shape is None:
        return None
    want = tried_gib * GIB
    hits = [(c, what) for c, what, size in candidates(shape, batch, seq, gpu_counts)
            if size and abs(size - want) <= TOLERANCE * want]
    if not hits or len({c for c, _ in hits}) > 1:
        return None                          # nothing, or two readings: the numbers do not decide
    return hits[0]
