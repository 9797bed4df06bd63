"""The compiled extension refuses a jaxlib other than the one it was built against."""

import pytest

from jaxdnn import _extension


def test_old_jaxlib_is_refused(monkeypatch):
  monkeypatch.setattr(_extension._build_info, "BUILT_AGAINST_JAXLIB", "999.0.0")
  with pytest.raises(ImportError, match="built against jaxlib 999.0.0"):
    _extension._check_jaxlib()
  monkeypatch.setattr(_extension._build_info, "BUILT_AGAINST_JAXLIB", "0.1.0")
  _extension._check_jaxlib()
