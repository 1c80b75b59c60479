#include "tests/bench/conv_bench.h"

#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "tests/bench/bench_util.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/model/models.h"
#include "worker/model/nn/conv2d.h"

namespace lockstep {
namespace {

// One Conv2D layer prepared on one device, with random input, kernel and
// output gradient and room for everything it writes.
class ConvRun {
 public:
  static absl::StatusOr<ConvRun> Create(Layer* layer, Device* device, int batch,
                                        bool input_gradient) {
    ConvRun run;
    run.layer_ = layer;
    run.batch_ = batch;
    run.input_gradient_ = input_gradient;
    RETURN_IF_ERROR(layer->Prepare(device, batch));
    const int64_t in = batch * layer->input_shapes()[0].size();
    const int64_t out = batch * layer->output_shape().size();
    const int64_t params = layer->NumParameters();
    ASSIGN_OR_RETURN(run.x_, Random(device, in, 1));
    ASSIGN_OR_RETURN(run.params_, Random(device, params, 2));
    ASSIGN_OR_RETURN(run.dy_, Random(device, out, 3));
    ASSIGN_OR_RETURN(run.y_, device->Allocate(out * sizeof(float)));
    ASSIGN_OR_RETURN(run.dx_, device->Allocate(in * sizeof(float)));
    ASSIGN_OR_RETURN(run.grads_, device->Allocate(params * sizeof(float)));
    ASSIGN_OR_RETURN(run.workspace_,
                     device->Allocate(std::max<size_t>(
                         layer->WorkspaceFloats(batch) * sizeof(float), 1)));
    return run;
  }

  // Seconds for one forward and one backward pass.
  absl::StatusOr<double> Time() {
    const float* inputs[] = {x_->As<float>()};
    float* input_grads[] = {input_gradient_ ? dx_->As<float>() : nullptr};
    const auto start = std::chrono::steady_clock::now();
    ForwardArgs f;
    f.batch = batch_;
    f.inputs = inputs;
    f.output = y_->As<float>();
    f.params = params_->As<float>();
    f.workspace = workspace_->As<float>();
    f.training = true;
    RETURN_IF_ERROR(layer_->Forward(f));
    BackwardArgs b;
    b.batch = batch_;
    b.inputs = inputs;
    b.output = y_->As<float>();
    b.output_grad = dy_->As<float>();
    b.input_grads = input_grads;
    b.params = params_->As<float>();
    b.param_grads = grads_->As<float>();
    b.workspace = workspace_->As<float>();
    RETURN_IF_ERROR(layer_->Backward(b));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }

 private:
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Random(Device* device,
                                                              int64_t n,
                                                              uint64_t seed) {
    lockstep::Random random(seed);
    std::vector<float> host(std::max<int64_t>(n, 1));
    for (float& v : host) v = random.Uniform(-1.0f, 1.0f);
    ASSIGN_OR_RETURN(auto buffer,
                     device->Allocate(host.size() * sizeof(float)));
    RETURN_IF_ERROR(device->CopyToDevice(host.data(), buffer->data(),
                                         host.size() * sizeof(float)));
    return buffer;
  }

  Layer* layer_ = nullptr;
  int batch_ = 0;
  bool input_gradient_ = true;
  std::unique_ptr<DeviceBuffer> x_, params_, dy_, y_, dx_, grads_, workspace_;
};

std::string Geometry(const Conv2D& conv) {
  const WindowGeometry& g = conv.window();
  const TensorShape& out = conv.output_shape();
  std::string pad = g.pad_top > 0 || g.pad_left > 0
                        ? absl::StrFormat(" pad %d,%d", g.pad_top, g.pad_left)
                        : "";
  return absl::StrFormat("%dx%dx%d %dx%d/%d%s -> %dx%dx%d", g.input.height,
                         g.input.width, g.input.channels, g.window_height,
                         g.window_width, g.stride_height, pad, out.height,
                         out.width, out.channels);
}

bool Pointwise(const WindowGeometry& g) {
  return g.window_height == 1 && g.window_width == 1 && g.stride_height == 1 &&
         g.stride_width == 1 && g.pad_top == 0 && g.pad_left == 0;
}

// A row's two runs: the direct convolutions' and im2col's.
using RunPair = std::pair<ConvRun, ConvRun>;

// One row per distinct convolution geometry of direct_graph (a repeated one
// counts its layers), with the runs that time it on both devices.
absl::Status PlanRows(const ConvBenchOptions& options,
                      const Graph& direct_graph, const Graph& im2col_graph,
                      Device* direct, Device* im2col, Device* automatic,
                      ConvBenchResult* result, std::vector<RunPair>* runs) {
  const std::vector<bool> needs_gradient =
      direct_graph.TensorsNeedingGradients();
  std::map<std::string, size_t> row_of;
  for (size_t i = 0; i < direct_graph.nodes().size(); ++i) {
    auto* conv = dynamic_cast<Conv2D*>(direct_graph.nodes()[i].layer.get());
    if (conv == nullptr) continue;
    // As training runs it: the input gradient only where the model needs it
    // (not for the first convolution).
    const bool input_gradient =
        needs_gradient[direct_graph.nodes()[i].inputs[0]];
    const std::string geometry =
        Geometry(*conv) + (input_gradient ? "" : " (no dx)");
    auto [it, added] = row_of.emplace(geometry, result->rows.size());
    if (!added) {
      ++result->rows[it->second].layers;
      continue;
    }
    ConvBenchRow row;
    row.geometry = geometry;
    row.layers = 1;
    const int filters = conv->output_shape().channels;
    row.chosen = automatic->HasDirectConv(conv->window(), filters) ? "direct"
                 : Pointwise(conv->window())                       ? "gemm"
                                                                   : "im2col";
    result->rows.push_back(row);
    ASSIGN_OR_RETURN(ConvRun a, ConvRun::Create(conv, direct, options.batch,
                                                input_gradient));
    ASSIGN_OR_RETURN(
        ConvRun b, ConvRun::Create(im2col_graph.nodes()[i].layer.get(), im2col,
                                   options.batch, input_gradient));
    runs->emplace_back(std::move(a), std::move(b));
  }
  return absl::OkStatus();
}

// Times one row: one untimed pass each first (fresh buffers fault their
// pages in), then the rounds alternate which way goes first (AB, BA, ...).
absl::Status TimeRow(int reps, RunPair* run, ConvBenchRow* row) {
  RETURN_IF_ERROR(run->first.Time().status());
  RETURN_IF_ERROR(run->second.Time().status());
  std::vector<double> direct_s, im2col_s;
  for (int rep = 0; rep < reps; ++rep) {
    double d = 0, m = 0;
    if (rep % 2 == 0) {
      ASSIGN_OR_RETURN(d, run->first.Time());
      ASSIGN_OR_RETURN(m, run->second.Time());
    } else {
      ASSIGN_OR_RETURN(m, run->second.Time());
      ASSIGN_OR_RETURN(d, run->first.Time());
    }
    direct_s.push_back(d);
    im2col_s.push_back(m);
  }
  row->direct_ms = 1e3 * Median(direct_s);
  row->im2col_ms = 1e3 * Median(im2col_s);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvBenchResult> RunConvBench(const ConvBenchOptions& options) {
  if (options.batch < 1 || options.reps < 1 || options.threads < 1) {
    return absl::InvalidArgumentError(
        "conv: --batch, --rounds and --threads must be >= 1");
  }
  if (!cpu_ops::DirectConvAvailable()) {
    return absl::FailedPreconditionError(
        "conv: this processor has no AVX-512F, so the CPU device has no "
        "direct convolutions to compare");
  }
  ModelSpec spec;
  spec.name = options.model;
  spec.input = {32, 32, 3};
  spec.conv_workspace_floats = CpuDevice::kConvWorkspaceFloats;
  // One graph per device: a layer is bound to the device it is prepared on.
  ASSIGN_OR_RETURN(Graph direct_graph, BuildModelGraph(spec));
  ASSIGN_OR_RETURN(Graph im2col_graph, BuildModelGraph(spec));
  // OpenBLAS's thread count is process-wide; the three agree on it.
  const int threads = options.threads;
  std::unique_ptr<Device> direct = CpuDevice::Create(threads, CpuConv::kDirect);
  std::unique_ptr<Device> im2col = CpuDevice::Create(threads, CpuConv::kIm2Col);
  std::unique_ptr<Device> automatic =
      CpuDevice::Create(threads, CpuConv::kAuto);

  ConvBenchResult result;
  result.load_average = LoadAverage();
  result.options = options;
  std::vector<RunPair> runs;  // Per row.
  RETURN_IF_ERROR(PlanRows(options, direct_graph, im2col_graph, direct.get(),
                           im2col.get(), automatic.get(), &result, &runs));
  if (result.rows.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv: model ", options.model, " has no convolution"));
  }
  for (size_t r = 0; r < result.rows.size(); ++r) {
    ConvBenchRow& row = result.rows[r];
    RETURN_IF_ERROR(TimeRow(options.reps, &runs[r], &row));
    result.direct_total_ms += row.layers * row.direct_ms;
    result.im2col_total_ms += row.layers * row.im2col_ms;
    result.chosen_total_ms +=
        row.layers * (row.chosen == "direct" ? row.direct_ms : row.im2col_ms);
  }
  return result;
}

std::string ConvResultJson(const ConvBenchResult& r) {
  JsonObjectWriter json;
  json.Add("mode", "conv")
      .Add("model", r.options.model)
      .Add("batch", r.options.batch)
      .Add("reps", r.options.reps)
      .Add("threads", r.options.threads)
      .Add("direct_total_ms", r.direct_total_ms)
      .Add("im2col_total_ms", r.im2col_total_ms)
      .Add("chosen_total_ms", r.chosen_total_ms)
      .Add("load_average_at_start", r.load_average)
      .Add("rows", static_cast<int>(r.rows.size()));
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const ConvBenchRow& row = r.rows[i];
    json.Add(absl::StrCat("row", i, "_geometry"), row.geometry)
        .Add(absl::StrCat("row", i, "_layers"), row.layers)
        .Add(absl::StrCat("row", i, "_direct_ms"), row.direct_ms)
        .Add(absl::StrCat("row", i, "_im2col_ms"), row.im2col_ms)
        .Add(absl::StrCat("row", i, "_chosen"), row.chosen);
  }
  return json.ToString();
}

void PrintConvTable(const ConvBenchResult& r, std::FILE* out) {
  std::string text = absl::StrFormat(
      "conv: %s, batch %d, %d thread%s; forward + backward of one layer, "
      "median of %d rounds after one untimed, alternating which goes first "
      "(load average %.2f)\n",
      r.options.model, r.options.batch, r.options.threads,
      r.options.threads == 1 ? "" : "s", r.options.reps, r.load_average);
  absl::StrAppendFormat(&text, "%-42s %6s %11s %11s %9s  %s\n", "geometry",
                        "layers", "direct ms", "im2col ms", "speedup",
                        "device uses");
  for (const ConvBenchRow& row : r.rows) {
    absl::StrAppendFormat(&text, "%-42s %6d %11.3f %11.3f %8.2fx  %s\n",
                          row.geometry, row.layers, row.direct_ms,
                          row.im2col_ms, row.im2col_ms / row.direct_ms,
                          row.chosen);
  }
  absl::StrAppendFormat(
      &text,
      "all convolutions per step: direct %.1f ms, im2col %.1f ms, as the "
      "device chooses %.1f ms (%.2fx im2col's speed)\n",
      r.direct_total_ms, r.im2col_total_ms, r.chosen_total_ms,
      r.im2col_total_ms / r.chosen_total_ms);
  std::fputs(text.c_str(), out);
}

}  // namespace lockstep
