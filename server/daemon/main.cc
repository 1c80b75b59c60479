// lockstep_server: one parameter-server shard.
#include "server/daemon/server_main.h"

int main(int argc, char** argv) {
  return lockstep::ServerMain(argc, argv, {}, nullptr);
}
