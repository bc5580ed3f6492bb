"""Trains a ResNet-50 on random 224x224 images for a few steps, convolutions through cuDNN.

A user's training script: channels-last, automatic mixed precision, SGD with momentum, and
cudnn.benchmark on, as image models are usually trained. The batch size is --batch (or $BS).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import training


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        width, out = planes, planes * self.expansion
        self.reduce = nn.Sequential(nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.spatial = nn.Sequential(nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.expand = nn.Sequential(nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
        self.shortcut = nn.Identity()
        if stride != 1 or inplanes != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        return F.relu(self.expand(self.spatial(self.reduce(x))) + self.shortcut(x))


def resnet50(classes=1000):
    stages, inplanes = [], 64
    for planes, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            stages.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * Bottleneck.expansion
    stem = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    return nn.Sequential(*stem, *stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inplanes, classes))


def main():
    args = training.arguments(__doc__, batch=64)
    torch.backends.cudnn.benchmark = True
    model = resnet50().cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def loss_of_step(step):
        images = torch.randn(args.batch, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (args.batch,), device="cuda")
        return F.cross_entropy(model(images), labels)

    training.train(loss_of_step, optimizer, args.steps, torch.float16)


if __name__ == "__main__":
    main()
