#ifndef WALLET_CLIBPQ_SHIM_H
#define WALLET_CLIBPQ_SHIM_H
#include <libpq-fe.h>

/* The PG_DIAG_* field codes are character-literal macros, which Swift does
   not import. */
static const int CLibPQ_DIAG_SQLSTATE = PG_DIAG_SQLSTATE;
static const int CLibPQ_DIAG_MESSAGE_PRIMARY = PG_DIAG_MESSAGE_PRIMARY;
static const int CLibPQ_DIAG_MESSAGE_DETAIL = PG_DIAG_MESSAGE_DETAIL;
static const int CLibPQ_DIAG_CONSTRAINT_NAME = PG_DIAG_CONSTRAINT_NAME;
static const int CLibPQ_DIAG_SEVERITY_NONLOCALIZED = PG_DIAG_SEVERITY_NONLOCALIZED;
#endif
