#include "tests/bench/server_bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/work_pool.h"
#include "common/formats/json_writer.h"
#include "common/kernels/kernels.h"
#include "common/model/chunk_plan.h"
#include "common/optim/optimizer.h"
#include "common/wire/wire_codec.h"
#include "server/core/chunk_barrier.h"
#include "tests/bench/bench_util.h"

namespace lockstep {
namespace {

// The block a shard's pool splits loops into.
constexpr int64_t kGrain = ChunkBarrier::kParallelGrain;

// The arrays every kernel works on, touched once so that no timed pass
// pays for page faults.
struct Arrays {
  explicit Arrays(int64_t n)
      : a(n, 0.5f),
        b(n, 1.5f),
        c(n, 0.25f),
        m(n, 0.0f),
        v(n, 0.0f),
        chunk_elements(AutoChunkBytes(n, 1) / 4) {
    EncodeTensor(b, WireDType::kFloat32, &fp32);
    EncodeTensor(b, WireDType::kBfloat16, &bf16);
  }
  std::vector<float> a, b, c, m, v;
  std::string fp32, bf16;  // Pushes as the wire carries them.
  // A one-shard job's chunks for this many elements (--chunk_bytes=auto).
  const int64_t chunk_elements;
};

// One kernel: what it does per block of elements, and its bytes.
struct Kernel {
  std::string name;
  double payload_bytes;  // Per element: the gradient a push carries.
  double traffic_bytes;  // Per element: arrays read plus arrays written.
  // Runs the loop over [0, n) with `pool` (split as the server splits it).
  std::function<void(WorkPool*, int64_t)> run;
};

double TimePasses(const Kernel& k, WorkPool* pool, int64_t n, int reps) {
  k.run(pool, n);  // Warm: caches, the pool's threads, branch predictors.
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const absl::Time start = absl::Now();
    k.run(pool, n);
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return Median(seconds);
}

void Blocks(WorkPool* pool, int64_t n,
            const std::function<void(int64_t, int64_t)>& fn) {
  pool->ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { fn(b, e); });
}

// An accumulation kernel: its name, the pushes' dtype, and whether the
// pushes are checked for non-finite values first.
struct SumKernel {
  const char* name;
  int dtype;
  bool checked;
};

// sum += push over n elements, chunk by chunk, as pushes arrive: the check
// reads a chunk's payload, then the sum reads it again, from cache.
void AccumulateChunks(const kernels::Table& t, Arrays* x, const SumKernel& s,
                      bool real_paths, WorkPool* pool, int64_t n) {
  const std::string& bytes = s.dtype == kernels::kF32 ? x->fp32 : x->bf16;
  const WireDType dtype =
      s.dtype == kernels::kF32 ? WireDType::kFloat32 : WireDType::kBfloat16;
  const size_t w = BytesPerElement(dtype);
  const int64_t chunk = x->chunk_elements;
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t len = std::min(chunk, n - at);
    const absl::string_view piece(bytes.data() + at * w,
                                  static_cast<size_t>(len) * w);
    absl::Span<float> sum = absl::MakeSpan(x->a.data() + at, len);
    if (real_paths) {
      if (s.checked) {
        AccumulateCheckedPieces({piece}, dtype, sum, false, pool, kGrain)
            .IgnoreError();  // Finite by construction.
      } else {
        AccumulateUncheckedPieces({piece}, dtype, sum, false, pool, kGrain);
      }
      continue;
    }
    std::atomic<bool> bad{false};
    if (s.checked) {
      Blocks(pool, len, [&](int64_t b, int64_t e) {
        if (t.any_nonfinite[s.dtype](piece.data() + b * w, e - b)) {
          bad = true;
        }
      });
    }
    if (bad) continue;
    Blocks(pool, len, [&](int64_t b, int64_t e) {
      t.accumulate[s.dtype](piece.data() + b * w, e - b, sum.data() + b);
    });
  }
}

// An optimizer step: its name, the optimizer, and the bytes it moves per
// element.
struct StepKernel {
  const char* name;
  const char* optimizer;
  double traffic;
};

// The optimizer's step `name` over n elements, through `opt` or the
// variant's table.
void OptimizerStep(const kernels::Table& t, Arrays* x, Optimizer* opt,
                   const std::string& name, bool real_paths, WorkPool* pool,
                   int64_t n) {
  Blocks(pool, n, [&](int64_t b, int64_t e) {
    const size_t len = static_cast<size_t>(e - b);
    if (real_paths) {
      opt->ApplyMean(7, b, absl::MakeConstSpan(x->b.data() + b, len),
                     absl::MakeSpan(x->a.data() + b, len),
                     absl::MakeConstSpan(x->c.data() + b, len), 0.5f);
    } else if (name == "sgd") {
      t.sgd[0][0](len, 1e-6f, 0, 0.5f, x->c.data() + b, x->b.data() + b,
                  x->a.data() + b);
    } else if (name == "momentum") {
      t.momentum[0][0][0](len, 1e-6f, 0, 0.9f, 0.5f, x->c.data() + b,
                          x->m.data() + b, x->b.data() + b, x->a.data() + b);
    } else {
      const kernels::AdamFactors f{0.9f,  0.999f, 0.1f, 0.001f,
                                   1e-6f, 1e-7f,  0.0f, 1e-6f};
      t.adam[0][0](len, f, 0.5f, x->c.data() + b, x->m.data() + b,
                   x->v.data() + b, x->b.data() + b, x->a.data() + b);
    }
  });
}

// The kernels as the given variant computes them. With `real_paths`, the
// sums and updates go through the server's own functions
// (AccumulateCheckedPieces, Optimizer::ApplyMean), which use the active
// variant; otherwise through the variant's table directly.
std::vector<Kernel> Kernels(const kernels::Table& t, Arrays* x, bool real_paths,
                            std::vector<std::unique_ptr<Optimizer>>* keep) {
  std::vector<Kernel> out;
  out.push_back({"copy", 0, 8, [&t, x](WorkPool* pool, int64_t n) {
                   Blocks(pool, n, [&](int64_t b, int64_t e) {
                     t.copy(e - b, x->b.data() + b, x->a.data() + b);
                   });
                 }});
  out.push_back({"triad", 0, 12, [&t, x](WorkPool* pool, int64_t n) {
                   Blocks(pool, n, [&](int64_t b, int64_t e) {
                     t.triad(e - b, 0.5f, x->b.data() + b, x->c.data() + b,
                             x->a.data() + b);
                   });
                 }});
  // sum += push: reads the push and the sum, writes the sum; the check
  // reads the push again (from cache, block by block).
  for (const SumKernel s :
       {SumKernel{"accumulate fp32", kernels::kF32, true},
        SumKernel{"accumulate fp32 unchecked", kernels::kF32, false},
        SumKernel{"accumulate bf16", kernels::kBf16, true}}) {
    const double width = s.dtype == kernels::kF32 ? 4 : 2;
    out.push_back({s.name, width, width + 8,
                   [&t, x, s, real_paths](WorkPool* pool, int64_t n) {
                     AccumulateChunks(t, x, s, real_paths, pool, n);
                   }});
  }
  // The optimizer's step, as a synchronous chunk applies it: reads the
  // published weights and the sum (and slots), writes the new weights (and
  // slots).
  for (const StepKernel s :
       {StepKernel{"sgd", "sgd", 12}, StepKernel{"momentum", "momentum", 20},
        StepKernel{"adam", "adam", 28}}) {
    OptimizerConfig config = OptimizerConfig::Defaults(s.optimizer);
    config.learning_rate = 1e-6;  // The weights stay finite pass after pass.
    keep->push_back(
        *Optimizer::Create(config, static_cast<int64_t>(x->a.size())));
    Optimizer* opt = keep->back().get();
    const std::string name = s.name;
    out.push_back({name, 4, s.traffic,
                   [&t, x, opt, name, real_paths](WorkPool* pool, int64_t n) {
                     OptimizerStep(t, x, opt, name, real_paths, pool, n);
                   }});
  }
  return out;
}

void Measure(const kernels::Table& t, bool real_paths, int threads,
             const ServerBenchOptions& o, Arrays* x,
             std::vector<ServerBenchRow>* rows) {
  WorkPool pool(threads);
  std::vector<std::unique_ptr<Optimizer>> keep;
  double triad = 0;
  for (const Kernel& k : Kernels(t, x, real_paths, &keep)) {
    ServerBenchRow row;
    row.kernel = k.name;
    row.variant = t.name;
    row.threads = threads;
    row.median_seconds = TimePasses(k, &pool, o.elements, o.reps);
    const double n = static_cast<double>(o.elements);
    row.payload_gbps = k.payload_bytes * n / row.median_seconds / 1e9;
    row.traffic_gbps = k.traffic_bytes * n / row.median_seconds / 1e9;
    if (k.name == "triad") triad = row.traffic_gbps;
    row.of_triad = triad > 0 ? row.traffic_gbps / triad : 0;
    rows->push_back(row);
  }
}

}  // namespace

absl::StatusOr<ServerBenchResult> RunServerBench(
    const ServerBenchOptions& options) {
  ServerBenchResult result;
  result.options = options;
  result.cores = WorkPool::AvailableCores();
  result.active_variant = kernels::Active().name;
  if (result.options.elements < kGrain) {
    return absl::InvalidArgumentError(
        absl::StrCat("--params must be at least ", kGrain));
  }
  if (result.options.threads.empty()) {
    for (int t = 1; t < result.cores; t *= 2) {
      result.options.threads.push_back(t);
    }
    result.options.threads.push_back(result.cores);
  }
  std::vector<const kernels::Table*> variants;
  for (const kernels::Table* t : kernels::Runnable()) {
    if (options.variants.empty() ||
        std::find(options.variants.begin(), options.variants.end(), t->name) !=
            options.variants.end()) {
      variants.push_back(t);
    }
  }
  if (variants.empty()) {
    return absl::InvalidArgumentError(
        "none of --variants is a kernel variant this CPU runs");
  }
  Arrays arrays(result.options.elements);
  // Each variant at one thread, through its own table.
  for (const kernels::Table* t : variants) {
    if (t == &kernels::Active()) continue;  // Measured below.
    Measure(*t, /*real_paths=*/false, 1, result.options, &arrays, &result.rows);
  }
  // The server's own paths (the active variant) at every thread count.
  for (int threads : result.options.threads) {
    Measure(kernels::Active(), /*real_paths=*/true, threads, result.options,
            &arrays, &result.rows);
  }
  return result;
}

void PrintServerTable(const ServerBenchResult& r, std::FILE* out) {
  std::fprintf(out,
               "server: %lld fp32 elements (%.0f MB per array; sums in "
               "chunks of %lld bytes), median of %d passes, %d core(s), "
               "active kernels %s\n",
               static_cast<long long>(r.options.elements),
               static_cast<double>(r.options.elements) * 4 / 1e6,
               static_cast<long long>(AutoChunkBytes(r.options.elements, 1)),
               r.options.reps, r.cores, r.active_variant.c_str());
  std::fprintf(out, "  %-26s %-8s %7s %10s %11s %11s %9s\n", "kernel",
               "variant", "threads", "ms/pass", "payload", "traffic",
               "of triad");
  for (const ServerBenchRow& row : r.rows) {
    std::fprintf(out, "  %-26s %-8s %7d %10.2f %11s %11s %8.0f%%\n",
                 row.kernel.c_str(), row.variant.c_str(), row.threads,
                 row.median_seconds * 1e3,
                 row.payload_gbps > 0
                     ? absl::StrFormat("%.2f GB/s", row.payload_gbps).c_str()
                     : "-",
                 absl::StrFormat("%.2f GB/s", row.traffic_gbps).c_str(),
                 row.of_triad * 100);
  }
  std::fprintf(out,
               "  payload: gradient bytes a push carries, per second; "
               "traffic: bytes the loop reads and writes (STREAM's count); "
               "of triad: traffic against triad's at the same threads\n");
}

std::string ServerResultJson(const ServerBenchResult& r) {
  std::vector<std::string> rows;
  for (const ServerBenchRow& row : r.rows) {
    JsonObjectWriter json;
    json.Add("kernel", row.kernel)
        .Add("variant", row.variant)
        .Add("threads", row.threads)
        .Add("median_seconds", row.median_seconds)
        .Add("payload_gbps", row.payload_gbps)
        .Add("traffic_gbps", row.traffic_gbps)
        .Add("of_triad", row.of_triad);
    rows.push_back(json.ToString());
  }
  JsonObjectWriter json;
  json.Add("mode", "server")
      .Add("elements", r.options.elements)
      .Add("reps", r.options.reps)
      .Add("cores", r.cores)
      .Add("active_variant", r.active_variant);
  std::string text = json.ToString();
  // The rows as an array after the flat fields.
  const size_t close = text.rfind('}');
  text = absl::StrCat(text.substr(0, close), ",\n  \"rows\": [\n",
                      absl::StrJoin(rows, ",\n"), "\n  ]\n}\n");
  return text;
}

}  // namespace lockstep
