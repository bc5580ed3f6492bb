"""A training step of each recurrent network cuDNN runs (LSTM with and
without bias and with projection, bidirectional GRU, RNN), printed as
{name: "ok" or the error}. PyTorch lays their weights into cuDNN's one
buffer offset by offset, checking every pointer cuDNN hands back."""
import json

import torch
import torch.nn as nn

networks = {
    "lstm": nn.LSTM(32, 64, 2),
    "lstm without bias": nn.LSTM(32, 64, 1, bias=False),
    "lstm with projection": nn.LSTM(32, 64, 2, proj_size=16),
    "bidirectional gru": nn.GRU(32, 64, 2, bidirectional=True),
    "rnn": nn.RNN(32, 64),
}
results = {}
for name, network in networks.items():
    try:
        network = network.cuda()
        out, _ = network(torch.randn(10, 3, 32, device="cuda"))
        out.sum().backward()
        torch.optim.Adam(network.parameters()).step()
        results[name] = "ok"
    except Exception as e:
        results[name] = f"{type(e).__name__}: {e}"
results["cudnn"] = torch.backends.cudnn.enabled and torch.backends.cudnn.is_available()
print(json.dumps(results))
