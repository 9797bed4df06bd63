"""The main job runs: `jaxdnn-demo` (the GPT, the LSTM, the ResNet and the
MLP) for a few steps at a tiny size, training, sampling and timing against XLA."""

import re

from jaxdnn import demo


def test_gpt_demo_runs(capsys):
  args = "--steps 3 --sample 8 --width 32 --depth 1 --heads 2 --kv-heads 1 --seq 16 --batch 4"
  assert demo.main(args.split() + ["--corpus-bytes", "40000"]) == 0
  out = capsys.readouterr().out
  assert "valid loss" in out and "sample:" in out and "training step: jaxdnn" in out


def test_lstm_demo_runs_and_learns(capsys):
  args = "--model lstm --steps 12 --sample 8 --hidden 32 --layers 2 --seq 16 --batch 8"
  assert demo.main(args.split() + ["--corpus-bytes", "40000"]) == 0
  out = capsys.readouterr().out
  losses = [float(v) for v in re.findall(r"valid loss (\d+\.\d+)", out)]
  assert len(losses) >= 2 and losses[-1] < losses[0] - 0.5  # from ln(256) = 5.5 down
  assert "sample:" in out and "training step: jaxdnn" in out and "lax.scan" in out


def test_mlp_demo_runs(capsys):
  assert demo.main(["--model", "mlp", "--steps", "2", "--width", "64", "--batch", "16"]) == 0
  assert "final loss" in capsys.readouterr().out


def test_resnet_demo_runs(capsys):
  args = "--model resnet --steps 2 --width 4 --batch 8 --train-images 32 --test-images 16"
  assert demo.main(args.split()) == 0
  out = capsys.readouterr().out
  assert "held-out accuracy" in out and "training step (batch 8): jaxdnn" in out


def test_unknown_model_is_refused(capsys):
  assert demo.main(["--model", "vgg"]) == 2
