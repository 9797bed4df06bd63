"""The main job runs: `jaxdnn-demo` (the GPT, and the MLP) for a few steps at
a tiny size, training, sampling and timing against XLA."""

from jaxdnn import demo


def test_gpt_demo_runs(capsys):
  args = "--steps 3 --sample 8 --width 32 --depth 1 --heads 2 --kv-heads 1 --seq 16 --batch 4"
  assert demo.main(args.split() + ["--corpus-bytes", "40000"]) == 0
  out = capsys.readouterr().out
  assert "valid loss" in out and "sample:" in out and "training step: jaxdnn" in out


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
