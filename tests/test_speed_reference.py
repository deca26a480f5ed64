"""One speed-reference value: parsed where the user wrote it, read back the same from what is stored."""

import pytest

from evokernel.errors import BadInput
from evokernel.harness import SpeedReference, get_task

GPU_TASK = get_task("attention-fwd")


def test_the_three_kinds_are_parsed_and_read_back_alike(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "ref.cu").write_text("// a reference kernel\n")
    original = SpeedReference.parse("original", GPU_TASK)
    library = SpeedReference.parse("cudnn", GPU_TASK)
    kernel_file = SpeedReference.parse("kernels/ref.cu", GPU_TASK, base_dir=tmp_path)
    assert (original.kind, library.kind, kernel_file.kind) == ("original", "library", "file")
    assert str(kernel_file) == str((tmp_path / "kernels" / "ref.cu").resolve())  # stored absolute
    for parsed in (original, library, kernel_file):
        assert SpeedReference.recorded(str(parsed), GPU_TASK) == parsed
    assert [r.column for r in (original, library, kernel_file)] == ["original", "cudnn", "ref"]
    assert original.words == "the task's original kernel" and kernel_file.words == "the kernel file ref.cu"
    assert library.words == library.over == "cudnn" and library.described.startswith("cudnn (")
    assert original.built and kernel_file.built and not library.built


@pytest.mark.parametrize("text", ["cudnnn", "kernels/missing.cu", ""])
def test_anything_else_is_one_line_naming_where_it_was_written(tmp_path, text):
    with pytest.raises(BadInput, match=r"^run.yaml: field 'speed_reference': '.*' is neither a baseline of task "
                                       r"attention-fwd \(original, cudnn, flash\) nor a kernel file"):
        SpeedReference.parse(text, GPU_TASK, where="run.yaml: field 'speed_reference'", base_dir=tmp_path)
