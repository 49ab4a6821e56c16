#ifndef WALLET_CLIBPQ_SHIM_H
#define WALLET_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
