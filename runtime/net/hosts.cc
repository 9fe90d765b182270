// Placeholder: being written (hosts file parsing, rank from the environment).
#include "runtime/net/hosts.h"
