"""Reading: encodings, redraws, prefixes, hard wraps, binary input, overlong lines."""

import io

import pytest

from advisor.evidence.lines import detect_wrap_width, logical_lines
from advisor.read.reader import InputError

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "23.67 GiB of which 1.05 GiB is free. Of the allocated memory 20.91 GiB is allocated by PyTorch, and 1.21 GiB "
       "is reserved by PyTorch but unallocated.")


def lines_of(data):
    return list(logical_lines(io.BytesIO(data)))


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "gb18030", "gbk", "utf-16"])
def test_decodes_common_encodings(encoding):
    text = "加载模型中……\n训练开始\n" + OOM + "\n"
    got = lines_of(text.encode(encoding))
    assert got[0].text == "加载模型中……"
    assert got[2].text == OOM


def test_undecodable_bytes_never_fail():
    got = lines_of(b"ok line\n\xff\xfe\xfa broken \xc3 bytes\n" + OOM.encode())
    assert got[-1].text == OOM


def test_crlf_ansi_and_redraws():
    data = (b"\x1b[33mWARNING\x1b[0m: something\r\n"
            b"  1%|          | 1/100 [00:01<01:39, 1.0s/it]\r  2%|          | 2/100 [00:02<01:38, 1.0s/it]\r\n"
            b"next\r\n")
    got = [ln.text for ln in lines_of(data)]
    assert got == ["WARNING: something", "  2%|          | 2/100 [00:02<01:38, 1.0s/it]", "next"]


def test_message_between_redraws_is_kept():
    got = [ln.text for ln in lines_of(b" 10%|# | 1/10 [00:01<00:09]\r{'loss': 1.0}\r 20%|## | 2/10 [00:02<00:08]\n")]
    assert got == ["{'loss': 1.0}", " 20%|## | 2/10 [00:02<00:08]"]


def test_rank_and_host_prefixes_are_stripped_and_rank_kept():
    got = lines_of(b"[rank3]: torch.OutOfMemoryError: x\nnode01: [default2]:hello\n[1744] plain\n")
    assert (got[0].text, got[0].rank) == ("torch.OutOfMemoryError: x", 3)
    assert (got[1].text, got[1].rank) == ("hello", 2)
    assert got[2].text == "plain"


def test_error_names_are_not_taken_for_hosts():
    got = lines_of(b"RuntimeError: CUDA error: out of memory\n")
    assert got[0].text == "RuntimeError: CUDA error: out of memory"


def test_hard_wrapped_lines_are_rejoined_with_original_numbers():
    body = "\n".join(["x" * 100, "y" * 100, "z" * 100, "intro"]) + "\n"
    wrapped = [OOM[i:i + 100] for i in range(0, len(OOM), 100)]
    got = lines_of((body + "\n".join(wrapped) + "\nafter\n").encode())
    texts = [ln.text for ln in got]
    assert OOM in texts
    assert got[texts.index(OOM)].no == 5
    assert texts[-1] == "after"


def test_a_colour_code_a_paste_lost_its_esc_to_takes_columns_in_the_wrap():
    # "[33m" without its ESC byte is text on the terminal: the piece it opens is full width with it
    text = "[33m(raylet) A worker died or was killed while executing a task by an unexpected system error. " \
           "To troubleshoot the problem, check the logs for the dead worker. " + "Worker ID: 7e75be2247357885 " * 29 + "end."
    pieces = [text[i:i + 100] for i in range(0, len(text), 100)]
    lines = lines_of(("\n".join(pieces) + "\nnext record\n").encode())
    assert [ln.no for ln in lines] == [1, len(pieces) + 1]
    assert lines[0].text.startswith("(raylet) A worker died") and "troubleshoot the problem" in lines[0].text


def test_wrap_width_needs_evidence():
    assert detect_wrap_width([40, 120, 80, 95]) is None
    assert detect_wrap_width([100, 100, 100, 37, 100]) == 100


def test_binary_input_is_refused():
    with pytest.raises(InputError):
        lines_of(bytes(range(256)) * 64)


def test_overlong_line_keeps_head_and_tail_only():
    bar = "".join(f"\r {i % 100}%|#| {i}/1000000 [00:00<00:00]" for i in range(200000))
    got = lines_of((bar + "\nend\n").encode())
    assert got[0].text.endswith("199999/1000000 [00:00<00:00]")
    assert len(got[0].text) < 200
    assert got[1].text == "end"


CHUNKED = ("plain start\r\n[INFO|2025-01-01 10:00:00] loader >> ok\r\n" * 3
           + "[31mRuntimeError: boom\r\n[rank1]: " + OOM + "\r\n").encode()
CUT = CHUNKED.index(b"[31m")


@pytest.mark.parametrize("chunk", [5, 12, CUT + 1, CUT + 2, CUT + 3, 1 << 20])
def test_chunk_boundaries_change_nothing(monkeypatch, chunk):
    # Colour codes and CRLF are looked for per chunk: a code or a '\r\n' cut in two by a chunk's end
    # must come out as when the whole log is one chunk (here the only colour is an ESC-less remnant).
    import advisor.read.reader as reader
    monkeypatch.setattr(reader, "CHUNK", chunk)
    got = [(ln.no, ln.text, ln.rank) for ln in lines_of(CHUNKED)]
    head = ["plain start", "[INFO|2025-01-01 10:00:00] loader >> ok"] * 3
    assert got == [(i, text, None) for i, text in enumerate(head, 1)] + [(7, "RuntimeError: boom", None), (8, OOM, 1)]


def test_a_long_line_before_a_bar_is_not_taken_for_a_wrap():
    # the bar's description could absorb the line above; the bar is whole on its own line
    first = "Refer to the documentation on how to address the issue: https://docs.ray.io/en/latest/ray-core/x.html."
    bar = "Episode [1/10000]:   7%|7         | 11/147 [3:34:08<44:07:37, 1168.07s/it]"
    assert [ln.text for ln in lines_of(f"{first}\n{bar}\n".encode())] == [first, bar]


def test_output_glued_after_a_bar_is_a_line_of_its_own():
    """tqdm draws no newline: whatever comes next sticks to the closing bracket."""
    got = lines_of("Running tokenizer: 100%|██████| 50/50 [00:01<00:00, 49.1 examples/s]Killed\n"
                   " 3%|▎ | 3/100 [00:09<04:50,  3.00s/it][rank1]: Traceback (most recent call last):\n".encode())
    assert [(ln.no, ln.text, ln.rank) for ln in got] == [
        (1, "Running tokenizer: 100%|██████| 50/50 [00:01<00:00, 49.1 examples/s]", None), (1, "Killed", None),
        (2, " 3%|▎ | 3/100 [00:09<04:50,  3.00s/it]", None), (2, "Traceback (most recent call last):", 1)]
    bar_with_postfix = " 3%|▎ | 3/100 [00:09<04:50,  3.00s/it, loss=1.2]"
    assert [ln.text for ln in lines_of(bar_with_postfix.encode())] == [bar_with_postfix]
    # a postfix after the rate (accelerate scripts' `lr=…, step_loss=…`) ends at the same bracket
    glued = lines_of(f"{bar_with_postfix}ERROR: Unexpected bus error encountered in worker.\n".encode())
    assert [ln.text for ln in glued] == [bar_with_postfix, "ERROR: Unexpected bus error encountered in worker."]


def test_one_record_wrapped_twice_without_a_known_phrase_cut_is_rejoined():
    """Two full-width pieces going on into a shorter line that starts no record (real_logs ot-028)."""
    record = ("UserWarning: Failed to clone() tensor with name lm_head.weight. This may mean that this state_dict "
              "entry could point to invalid memory regions after returning from state_dict() call. Error: " + OOM)
    width = 152
    pieces = [record[i:i + width] for i in range(0, len(record), width)]
    assert len(pieces) == 3 and not pieces[2][:1].isupper()
    assert [ln.text for ln in lines_of(("\n".join(pieces) + "\n").encode())] == [record]


def test_rows_of_one_width_are_not_a_wrap():
    row = "| 0  NVIDIA A100-SXM4-80GB  On | 00000000:07:00.0 Off |   0 |" + " " * 20 + "|"
    table = "\n".join([row, row.replace("0  NVIDIA", "1  NVIDIA"), "done"]) + "\n"
    assert len(lines_of(table.encode())) == 3


def test_nested_rank_prefixes_keep_the_outer_launchers_rank():
    got = lines_of(b"[rank0]: [rank1]:   File \"/x/torch/_tensor.py\", line 525, in backward\n[rank0]:  line 9, in f\n")
    assert [ln.rank for ln in got] == [0, 0]
