"""Built as torchbench's torchvision models are: a torchvision-style builder asked for pretrained
weights, whose URL (a closed local port) no host can reach."""

import torch
from torchvision.models._api import Weights, WeightsEnum

from ...util.model import BenchmarkModel


class TinyWeights(WeightsEnum):
    IMAGENET1K_V1 = Weights(url="http://127.0.0.1:9/tiny_weights-00000000.pth", transforms=lambda: None,
                            meta={"categories": ["a", "b", "c", "d"]})
    DEFAULT = IMAGENET1K_V1


def tiny_classifier(weights=None):
    """torchvision's builder pattern: verify the weights, build, load them if any."""
    weights = TinyWeights.verify(weights)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    if weights is not None:
        model.load_state_dict(weights.get_state_dict(progress=False, check_hash=True))
    return model


class Model(BenchmarkModel):
    DEFAULT_TRAIN_BSIZE = 4
    DEFAULT_EVAL_BSIZE = 2

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size, extra_args=extra_args)
        self.model = tiny_classifier(weights=TinyWeights.IMAGENET1K_V1).to(device)
        self.example_inputs = (torch.randn(self.batch_size, 16, device=device),)

    def get_module(self):
        return self.model, self.example_inputs
