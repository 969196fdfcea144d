# Used as sitecustomize.py on PYTHONPATH for mobilevit_s_timm_pin_fixed.json. The development venv's
# torchvision 0.28 (a CUDA build) fails to import on torch 2.13+cpu: its C ops library does not
# load, and torchvision/_meta_registrations.py then fails registering fake kernels for
# torchvision::nms. Pre-empt that one module (fake kernels of detection ops, unused here) so the
# rest imports; timm 1.0.9.dev0 (PyTorch CI's pin) imports torchvision at import time.
import sys
import types

sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
