// LibTorch implementation of the eager reference model (see eager_model.h). It follows
// cs336_basics.model.BasicsTransformerLM operation by operation: Linear is x @ W^T with W
// [out, in]; RMSNorm upcasts to f32, x * rsqrt(mean(x^2) + eps) * g; RoPE rotates adjacent
// pairs (x[2i], x[2i+1]) by pos * theta^(-2i/d) with the angles in f32; attention is
// softmax(QK^T / sqrt(d) with a causal -inf mask) V; SwiGLU is w2(silu(w1 x) * w3 x).
// Under bf16 the forward and the loss run inside LibTorch's CUDA autocast, which applies the
// policy fusec's autocast pass copies (GEMMs in bf16 with f32 accumulation; softmax,
// cross-entropy and the explicitly upcast RMSNorm in f32; pointwise ops at their operands'
// widest dtype). Only API common to LibTorch 1.13 and 2.x is used, except autocast's switches,
// which CudaAutocast picks by version.
#include "bench/eager_model.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>

#include "bench/torch_convert.h"

namespace fusec::bench {

namespace {

namespace F = torch::nn::functional;

torch::Tensor proj(const torch::Tensor& x, const torch::Tensor& w) { return torch::matmul(x, w.t()); }

torch::Tensor rmsNormF32(const torch::Tensor& x, const torch::Tensor& g, double eps) {
  auto in = x.scalar_type();
  auto xf = x.to(torch::kFloat32);
  auto r = xf * torch::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return (r * g).to(in);
}

// `with torch.autocast("cuda", dtype=torch.bfloat16):` as a scope. Leaving the outermost one
// clears autocast's cache of weight casts, as Python's __exit__ does: the cached bf16 copies
// would be stale after the optimizer step. LibTorch 2.4 replaced the CUDA-only switches
// (set_enabled, set_autocast_gpu_dtype) by per-device ones.
class CudaAutocast {
 public:
  explicit CudaAutocast(bool on) : on_(on) {
    if (!on_) return;
    wasEnabled_ = enabled();
    oldDType_ = dtype();
    set(true, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CudaAutocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(wasEnabled_, oldDType_);
  }
  CudaAutocast(const CudaAutocast&) = delete;
  CudaAutocast& operator=(const CudaAutocast&) = delete;

 private:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  static bool enabled() { return at::autocast::is_autocast_enabled(at::kCUDA); }
  static at::ScalarType dtype() { return at::autocast::get_autocast_dtype(at::kCUDA); }
  static void set(bool on, at::ScalarType d) {
    at::autocast::set_autocast_dtype(at::kCUDA, d);
    at::autocast::set_autocast_enabled(at::kCUDA, on);
  }
#else
  static bool enabled() { return at::autocast::is_enabled(); }
  static at::ScalarType dtype() { return at::autocast::get_autocast_gpu_dtype(); }
  static void set(bool on, at::ScalarType d) {
    at::autocast::set_autocast_gpu_dtype(d);
    at::autocast::set_enabled(on);
  }
#endif
  bool on_, wasEnabled_ = false;
  at::ScalarType oldDType_ = at::kBFloat16;
};

}  // namespace

bool torchCudaAvailable(std::string* why) {
  const bool ok = torch::cuda::is_available();
  if (!ok && why)
    *why = std::string("LibTorch ") + TORCH_VERSION + " sees no CUDA device" +
           (torch::cuda::device_count() == 0 ? "" : " (devices counted but unusable)");
  return ok;
}

struct EagerModel::Impl {
  models::ModelConfig cfg;
  torch::Device device{torch::kCPU};
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;  // in parameterSpecs order, requires_grad
  std::map<std::string, torch::Tensor> byName;
  torch::Tensor ropeCos, ropeSin;  // [ctx, d_head / 2], f32
  std::unique_ptr<torch::optim::AdamW> optimizer;
  models::AdamWConfig adamw;
  bool bf16 = false;  // forward and loss under CUDA autocast
  torch::Tensor stagedIds, stagedTargets;  // stageTokens()

  const torch::Tensor& p(const std::string& n) const { return byName.at(n); }

  torch::Tensor rope(const torch::Tensor& x, int64_t T) const {  // x [B, H, T, dh]
    auto sizes = x.sizes().vec();
    auto pairs = x.reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2});
    auto x1 = pairs.select(-1, 0), x2 = pairs.select(-1, 1);
    auto c = ropeCos.slice(0, 0, T), s = ropeSin.slice(0, 0, T);
    auto r1 = c * x1 - s * x2, r2 = s * x1 + c * x2;
    return torch::stack({r1, r2}, -1).reshape(sizes);
  }

  torch::Tensor logits(const torch::Tensor& ids) const {
    const int64_t B = ids.size(0), T = ids.size(1), D = cfg.dModel, H = cfg.heads, dh = D / H;
    auto x = F::embedding(ids, p("token_embeddings.weight"));
    auto causal = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(device)).tril();
    for (int64_t l = 0; l < cfg.layers; ++l) {
      const std::string pre = "layers." + std::to_string(l) + ".";
      auto h = rmsNormF32(x, p(pre + "ln1.weight"), cfg.eps);
      auto heads = [&](const std::string& w) { return proj(h, p(pre + "attn." + w + ".weight")).view({B, T, H, dh}).transpose(1, 2); };
      auto q = rope(heads("q_proj"), T), k = rope(heads("k_proj"), T), v = heads("v_proj");
      auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(dh));
      scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
      auto attn = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).contiguous().view({B, T, D});
      x = x + proj(attn, p(pre + "attn.output_proj.weight"));
      auto h2 = rmsNormF32(x, p(pre + "ln2.weight"), cfg.eps);
      auto a = proj(h2, p(pre + "ffn.w1.weight"));
      x = x + proj(a * torch::sigmoid(a) * proj(h2, p(pre + "ffn.w3.weight")), p(pre + "ffn.w2.weight"));
    }
    return proj(rmsNormF32(x, p("ln_final.weight"), cfg.eps), p("lm_head.weight"));
  }

  // The forward and the loss inside the autocast scope (under bf16); backward runs after
  // the scope is left, as in a PyTorch training loop.
  torch::Tensor loss(const torch::Tensor& ids, const torch::Tensor& targets) const {
    CudaAutocast autocast(bf16);
    auto lg = logits(ids);
    return F::cross_entropy(lg.view({-1, cfg.vocab}), targets.reshape({-1}));
  }

  // The optimizer, created by the first step; later steps must pass the same config.
  torch::optim::AdamW& optimizerFor(const models::AdamWConfig& c);

  torch::Tensor tokens(const HostTensor& t, const char* what) const {
    if (t.type.dtype != DType::i64 || t.type.rank() != 2)
      throw Error(std::string("eager model: ") + what + " is " + t.type.str() + ", expected i64[B,T]");
    return toTorch(t, device);
  }
};

EagerModel::EagerModel(const models::ModelConfig& cfg, const Bindings& weights, const EagerOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  models::validate(cfg);
  impl_->cfg = cfg;
  if (opts.dtype != DType::f32 && opts.dtype != DType::bf16)
    throw Error("eager model: dtype " + std::string(dtypeName(opts.dtype)) + " is not supported (f32 or bf16)");
  impl_->bf16 = opts.dtype == DType::bf16;
  guarded("setup", [&] {
    impl_->device = torch::Device(opts.device);
    if (impl_->bf16 && !impl_->device.is_cuda())
      throw Error("eager model: bf16 eager needs CUDA (it runs under CUDA autocast), got device '" + opts.device + "'");
    for (const auto& spec : models::parameterSpecs(cfg)) {
      auto it = weights.find(spec.name);
      Type want{DType::f32, spec.shape};
      if (it == weights.end()) throw Error("eager model: missing weight '" + spec.name + "' (expected " + want.str() + ")");
      if (it->second.type != want)
        throw Error("eager model: weight '" + spec.name + "' is " + it->second.type.str() + ", expected " + want.str());
      auto t = toTorch(it->second, impl_->device).set_requires_grad(true);
      impl_->names.push_back(spec.name);
      impl_->params.push_back(t);
      impl_->byName[spec.name] = t;
    }
    // cs336 RotaryEmbedding._init_cache: theta ** -(arange(0, d, 2) / d), times positions, in f32.
    const int64_t dh = cfg.dModel / cfg.heads;
    auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    auto freqs = torch::pow(torch::tensor(float(cfg.ropeTheta), f32), -(torch::arange(0, dh, 2, f32) / float(dh)));
    auto angles = torch::outer(torch::arange(cfg.ctx, f32), freqs);
    impl_->ropeCos = torch::cos(angles).to(impl_->device);
    impl_->ropeSin = torch::sin(angles).to(impl_->device);
  });
}

EagerModel::~EagerModel() {
  const bool cuda = impl_->device.is_cuda();
  impl_.reset();  // the tensors and the optimizer state first, so their blocks are free
  if (cuda) {
    try {
      releaseCachedCudaMemory();
    } catch (const c10::Error&) {
      // Only costs memory that the caching allocator keeps; a destructor must not throw.
    }
  }
}

const models::ModelConfig& EagerModel::config() const { return impl_->cfg; }

HostTensor EagerModel::forward(const HostTensor& ids) {
  return guarded("forward", [&] {
    torch::NoGradGuard noGrad;
    CudaAutocast autocast(impl_->bf16);
    return toHost(impl_->logits(impl_->tokens(ids, "ids")));
  });
}

EagerModel::LossAndGrads EagerModel::lossAndGradients(const HostTensor& ids, const HostTensor& targets) {
  return guarded("backward", [&] {
    for (auto& t : impl_->params) t.mutable_grad() = torch::Tensor();
    auto loss = impl_->loss(impl_->tokens(ids, "ids"), impl_->tokens(targets, "targets"));
    loss.backward();
    LossAndGrads r;
    r.loss = loss.item<float>();
    for (size_t k = 0; k < impl_->params.size(); ++k) {
      const auto& g = impl_->params[k].grad();
      r.grads[impl_->names[k]] = g.defined() ? toHost(g) : toHost(torch::zeros_like(impl_->params[k]));
      impl_->params[k].mutable_grad() = torch::Tensor();
    }
    return r;
  });
}

torch::optim::AdamW& EagerModel::Impl::optimizerFor(const models::AdamWConfig& c) {
  if (!optimizer) {
    adamw = c;
    optimizer = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(c.lr)
                                                                  .betas(std::make_tuple(c.beta1, c.beta2))
                                                                  .eps(c.eps)
                                                                  .weight_decay(c.weightDecay));
  } else if (c.lr != adamw.lr || c.beta1 != adamw.beta1 || c.beta2 != adamw.beta2 || c.eps != adamw.eps ||
             c.weightDecay != adamw.weightDecay) {
    throw Error("eager model: the AdamW config cannot change between steps");
  }
  return *optimizer;
}

float EagerModel::trainStep(const HostTensor& ids, const HostTensor& targets, const models::AdamWConfig& c) {
  return guarded("train step", [&] {
    auto& opt = impl_->optimizerFor(c);
    opt.zero_grad();
    auto loss = impl_->loss(impl_->tokens(ids, "ids"), impl_->tokens(targets, "targets"));
    loss.backward();
    opt.step();
    return loss.item<float>();
  });
}

void EagerModel::stageTokens(const HostTensor& ids, const HostTensor& targets) {
  guarded("stage tokens", [&] {
    impl_->stagedIds = impl_->tokens(ids, "ids");
    impl_->stagedTargets = impl_->tokens(targets, "targets");
  });
}

namespace {
const torch::Tensor& staged(const torch::Tensor& t) {
  if (!t.defined()) throw Error("eager model: stageTokens() was not called");
  return t;
}
}  // namespace

void EagerModel::forwardStaged() {
  guarded("forward", [&] {
    torch::NoGradGuard noGrad;
    CudaAutocast autocast(impl_->bf16);
    impl_->logits(staged(impl_->stagedIds));
  });
}

void EagerModel::lossAndGradientsStaged() {
  guarded("backward", [&] {
    for (auto& t : impl_->params) t.mutable_grad() = torch::Tensor();
    impl_->loss(staged(impl_->stagedIds), staged(impl_->stagedTargets)).backward();
  });
}

void EagerModel::trainStepStaged(const models::AdamWConfig& c) {
  guarded("train step", [&] {
    auto& opt = impl_->optimizerFor(c);
    opt.zero_grad();
    impl_->loss(staged(impl_->stagedIds), staged(impl_->stagedTargets)).backward();
    opt.step();
  });
}

Bindings EagerModel::parameters() const {
  return guarded("parameters", [&] {
    Bindings out;
    for (size_t k = 0; k < impl_->params.size(); ++k) out[impl_->names[k]] = toHost(impl_->params[k]);
    return out;
  });
}

}  // namespace fusec::bench
