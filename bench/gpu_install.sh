# Sourced on the GPU machine in the last of the device calls that carry onnxruntime-gpu's wheel parts
# (calls 1..N-1 appended parts 1..N-1 to /tmp/stage/wheel; this call carries .stage/pN and .whl):
# joins the wheel, installs it with polygraphy and onnx-graphsurgeon into /tmp/site, sets PYTHONPATH.
if [ ! -d /tmp/site/onnxruntime ]; then  # once per machine
  last=$(ls -d .stage/p* | sort -V | tail -1)
  cat "$last"/part* >> /tmp/stage/wheel
  name=$(cat "$last"/WHEEL_NAME)
  mv /tmp/stage/wheel "/tmp/stage/$name"
  extra=$(ls .whl/*.whl 2>/dev/null)  # polygraphy and onnx-graphsurgeon, where carried (gpu_nodewise.py needs neither)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "/tmp/stage/$name" $extra || return 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
