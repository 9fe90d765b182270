#include "runtime/model/sequential.h"

#include <algorithm>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/kernels.h"

namespace dpg::model {

Sequential::Sequential(std::vector<std::unique_ptr<Layer>> layers, int classes, std::uint64_t seed)
    : layers_(std::move(layers)), classes_(classes) {
  if (layers_.empty()) fail(Code::invalid_argument, "model: no layers");
  if (classes < 2) {
    fail(Code::invalid_argument, "model: at least two classes, not " + std::to_string(classes));
  }
  std::size_t total = 0;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (l > 0 && !(layers_[l]->in_shape() == layers_[l - 1]->out_shape())) {
      fail(Code::invalid_argument, "model: layer " + std::to_string(l + 1) + " (" +
                                       layers_[l]->describe() + ") takes " +
                                       to_string(layers_[l]->in_shape()) + ", but layer " +
                                       std::to_string(l) + " gives " +
                                       to_string(layers_[l - 1]->out_shape()));
    }
    offsets_.push_back(total);
    total += layers_[l]->param_count();
  }
  if (layers_.back()->out_shape().size() != static_cast<std::size_t>(classes)) {
    fail(Code::invalid_argument, "model: the last layer gives " +
                                     to_string(layers_.back()->out_shape()) + ", not the " +
                                     std::to_string(classes) + " classes");
  }
  params_.resize(total);
  Rng rng(seed, stream::kInit);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->init(std::span<float>(params_).subspan(offsets_[l], layers_[l]->param_count()),
                     rng);
  }
}

std::vector<std::string> Sequential::describe() const {
  std::vector<std::string> out;
  for (const auto& l : layers_) {
    std::string line = l->describe() + " -> " + to_string(l->out_shape());
    if (l->param_count() > 0) {
      line += ", " + std::to_string(l->param_count()) + " parameters, norms " +
              to_string(l->norm_method());
    }
    out.push_back(std::move(line));
  }
  return out;
}

void Sequential::resize(Pass& pass, std::size_t batch) const {
  pass.batch = batch;
  pass.act.resize(layers_.size() + 1);
  pass.grad.resize(layers_.size());
  pass.act[0].resize(batch * input().size());
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const std::size_t n = batch * layers_[l]->out_shape().size();
    pass.act[l + 1].resize(n);
    pass.grad[l].resize(n);
  }
  pass.loss.resize(batch);
}

void Sequential::forward(Pass& pass) const {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->forward(slice(l), pass.act[l].data(), pass.act[l + 1].data(), pass.batch);
  }
}

std::size_t Sequential::loss_and_backward(std::span<const std::int32_t> labels, Pass& pass,
                                          bool backward) const {
  DPG_CHECK_EQ(labels.size(), pass.batch);
  if (pass.batch == 0) return 0;
  const std::size_t last = layers_.size() - 1;
  const std::size_t correct =
      kernels::softmax_xent(pass.act.back().data(), labels.data(), pass.batch,
                            static_cast<std::size_t>(classes_), pass.loss.data(),
                            backward ? pass.grad[last].data() : nullptr);
  if (!backward) return correct;
  // Layer l's input gradient is layer l - 1's output gradient; the first layer's is not needed.
  for (std::size_t l = last; l >= 1; --l) {
    layers_[l]->backward(slice(l), pass.act[l].data(), pass.act[l + 1].data(),
                         pass.grad[l].data(), pass.grad[l - 1].data(), pass.batch);
  }
  return correct;
}

void Sequential::per_example_sq_norms(const Pass& pass, std::span<float> out) const {
  DPG_CHECK_EQ(out.size(), pass.batch);
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->add_sq_norms(slice(l), pass.act[l].data(), pass.grad[l].data(), pass.batch,
                             out.data());
  }
}

void Sequential::accumulate_gradient(const Pass& pass, std::span<const float> scale,
                                     std::span<float> grad_out) const {
  DPG_CHECK_EQ(grad_out.size(), params_.size());
  if (!scale.empty()) DPG_CHECK_EQ(scale.size(), pass.batch);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->add_gradient(slice(l), pass.act[l].data(), pass.grad[l].data(),
                             scale.empty() ? nullptr : scale.data(), pass.batch,
                             grad_out.subspan(offsets_[l], layers_[l]->param_count()));
  }
}

Sequential::Evaluation Sequential::evaluate(std::span<const float> x,
                                            std::span<const std::int32_t> labels,
                                            Pass& pass) const {
  const std::size_t rows = labels.size(), width = input().size();
  DPG_CHECK_EQ(x.size(), rows * width);
  constexpr std::size_t kChunk = 512;
  Evaluation ev;
  ev.rows = rows;
  for (std::size_t start = 0; start < rows; start += kChunk) {
    const std::size_t n = std::min(kChunk, rows - start);
    resize(pass, n);
    std::copy_n(x.data() + start * width, n * width, pass.act[0].data());
    forward(pass);
    ev.correct += loss_and_backward(labels.subspan(start, n), pass, false);
    for (std::size_t i = 0; i < n; ++i) ev.loss_sum += pass.loss[i];
  }
  return ev;
}

std::vector<std::unique_ptr<Layer>> preset_layers(const std::string& name, Shape input,
                                                  int classes) {
  if (name != "cnn") {
    fail(Code::invalid_argument, "model: no preset named '" + name.substr(0, 40) +
                                     "' (presets: cnn)");
  }
  if (input.h < 16 || input.w < 16) {
    fail(Code::invalid_argument, "model cnn: its windows need images of at least 16x16, not " +
                                     to_string(input));
  }
  std::vector<std::unique_ptr<Layer>> l;
  const auto add = [&l](std::unique_ptr<Layer> next) { l.push_back(std::move(next)); };
  const auto out = [&l] { return l.back()->out_shape(); };
  add(conv2d(input, 16, 8, 2, 2));
  add(activation(out(), Activation::tanh));
  add(max_pool(out(), 2, 1));
  add(conv2d(out(), 32, 4, 2, 0));
  add(activation(out(), Activation::tanh));
  add(max_pool(out(), 2, 1));
  add(flatten(out()));
  add(dense(out(), 32));
  add(activation(out(), Activation::tanh));
  add(dense(out(), classes));
  return l;
}

}  // namespace dpg::model
