"""torch_models.py — models written as PyTorch users write them, for the
torch.compile backend's example, benchmark (bench/torch/run.py) and tests
(python/tests/test_backend.py): a pre-norm transformer block whose forward
unpacks shapes and chunks (what torch.fx.symbolic_trace cannot trace) and a
ResNet basic block."""

import torch

nn, F = torch.nn, torch.nn.functional


class Block(nn.Module):
    """x + attention(ln1(x)) with `heads` heads, then + a GELU MLP of ln2(x)."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (D // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch norm, ReLU and the shortcut."""

    def __init__(self, c=64):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))
