#ifndef WALLET_CMICROHTTPD_SHIM_H
#define WALLET_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/* MHD_start_daemon is variadic, which Swift cannot call. Every option goes
   through one MHD_OPTION_ARRAY instead, so this wrapper has a fixed arity. */
static inline struct MHD_Daemon *
CMicroHTTPD_start(unsigned int flags, uint16_t port,
                  MHD_AccessHandlerCallback handler, void *handler_cls,
                  struct MHD_OptionItem *options)
{
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}
#endif
