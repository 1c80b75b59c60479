#include "common/flags/flag_help.h"

#include <map>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags/env_flags.h"

namespace lockstep {
namespace {

// A topic of --help and the flags it holds, comma-separated. A name is in
// one topic; the binaries that share a name share its topic.
struct Topic {
  const char* title;
  const char* flags;
};

// In the order --help prints them; "Other" (any flag not named here) last.
constexpr Topic kTopics[] = {
    {"Job",
     "workers,rank,servers,ps,listen,shard,num_shards,port_file,"
     "exit_when_done,bin_dir,startup_timeout,grace_period,gpus,server_flag,"
     "worker_flag,hosts,ps_hosts,server_port,ssh_args,remote_bin_dir,"
     "nproc_per_node,nnodes"},
    {"Model", "model,layers,input_shape,seed,init_weights"},
    {"Training",
     "optimizer,lr,momentum,nesterov,beta_1,beta_2,epsilon,weight_decay,"
     "batch_size,epochs,max_steps,augment,eval_every_epoch,sum_order,"
     "lr_schedule,lr_decay_steps,lr_decay_rate,lr_staircase,lr_boundaries,"
     "lr_values,lr_alpha,lr_warmup_steps,lr_warmup_from"},
    {"Data", "dataset,data_dir,synthetic_examples,validation_split"},
    {"Device", "device,gpu,tf32,cpu_threads,cpu_conv"},
    {"Exchange",
     "sync,allreduce,allreduce_host,allreduce_group,backup_workers,staleness,"
     "wire_dtype,push_window,push_thread,chunk_bytes,straggle,"
     "straggle_input,straggle_random_ms"},
    {"Checkpoints",
     "checkpoint_dir,init_from,weights_file,checkpoint_every_steps,"
     "checkpoint_every_seconds,checkpoints_to_keep,allow_fresh_start,"
     "dump_weights"},
    {"Timeouts and failures",
     "connect_timeout_s,rejoin_timeout_s,step_timeout_s,no_worker_timeout_s,"
     "on_worker_loss"},
    {"Transport",
     "server_threads,max_message_mb,max_chunk_bytes,max_parameters,"
     "max_state_mb,max_grpc_memory_mb,max_concurrent_streams,"
     "max_connection_idle_s,max_connection_age_s"},
    {"TLS and authentication",
     "tls,tls_dir,tls_cert,tls_key,tls_ca,tls_server_name,tls_refresh_s,"
     "token_file,admin_identities,worker_identities,insecure"},
    {"Observability",
     "progress,summary_json,step_log,metrics_port,metrics_port_base,"
     "health_port,health_port_base,trace,trace_dir,tensorboard_dir,list_flags,"
     "validate_only,straggler_fraction"},
    {"Polling", "watch,interval,count,timeout"},
    {"Test hooks", "testing_checkpoint_pause_ms,testing_restore_pause_ms"},
};
constexpr char kOther[] = "Other";

}  // namespace

absl::string_view FlagGroup(absl::string_view name) {
  for (const Topic& topic : kTopics) {
    for (absl::string_view flag : absl::StrSplit(topic.flags, ',')) {
      if (flag == name) return topic.title;
    }
  }
  return kOther;
}

bool IsHelpFile(absl::string_view filename,
                const std::vector<std::string>& help_files) {
  for (const std::string& part : help_files) {
    if (absl::StrContains(filename, part)) return true;
  }
  return false;
}

void PrintGroupedHelp(std::ostream& out, absl::string_view usage,
                      const std::vector<std::string>& help_files) {
  // Group title -> the group's flags by name.
  std::map<absl::string_view,
           std::map<absl::string_view, const absl::CommandLineFlag*>>
      groups;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsHelpFile(flag->Filename(), help_files)) continue;
    groups[FlagGroup(name)][name] = flag;
  }
  // As absl starts its own help: "PROGRAM: usage".
  out << absl::flags_internal::ShortProgramInvocationName() << ": " << usage
      << "\n";
  std::vector<absl::string_view> order;
  for (const Topic& topic : kTopics) order.push_back(topic.title);
  order.push_back(kOther);
  for (absl::string_view title : order) {
    auto it = groups.find(title);
    if (it == groups.end()) continue;
    out << "\n" << title << ":\n";
    for (const auto& [name, flag] : it->second) {
      absl::flags_internal::FlagHelp(out, *flag);
    }
  }
  std::vector<std::string> variables;
  for (absl::string_view name : EnvironmentFlags()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && IsHelpFile(flag->Filename(), help_files)) {
      variables.push_back(EnvironmentVariableOf(name));
    }
  }
  if (!variables.empty()) {
    out << "\nFrom the environment too, where the command line does not give "
           "them (docs/flags.md): "
        << absl::StrJoin(variables, ", ") << ".\n";
  }
  out << "\nThe flags above are this program's own; --helpfull lists every "
         "flag, absl's included.\n";
}

void PrintFlagTable(std::ostream& out) {
  std::map<absl::string_view, bool> flags;  // Name -> whether bool.
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    flags[name] = flag->IsOfType<bool>();
  }
  for (const auto& [name, is_bool] : flags) {
    out << name << (is_bool ? " bool\n" : " value\n");
  }
}

}  // namespace lockstep
