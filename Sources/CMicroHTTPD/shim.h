#ifndef WALLET_CMICROHTTPD_SHIM_H
#define WALLET_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stddef.h>
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

/* Option items, one constructor per argument shape, so clang checks the
   callback types instead of Swift bit-casting function pointers. */
typedef void *(*CMicroHTTPD_URILogCallback)(void *cls, const char *uri,
                                            struct MHD_Connection *connection);

static inline struct MHD_OptionItem
CMicroHTTPD_option_uint(enum MHD_OPTION option, unsigned int value)
{
    struct MHD_OptionItem item = { option, (intptr_t) value, NULL };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_size(enum MHD_OPTION option, size_t value)
{
    struct MHD_OptionItem item = { option, (intptr_t) value, NULL };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_sock_addr(const struct sockaddr *address)
{
    struct MHD_OptionItem item = { MHD_OPTION_SOCK_ADDR, 0, (void *) address };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_logger(MHD_LogCallback callback, void *cls)
{
    struct MHD_OptionItem item = { MHD_OPTION_EXTERNAL_LOGGER, (intptr_t) callback, cls };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_uri_log(CMicroHTTPD_URILogCallback callback, void *cls)
{
    struct MHD_OptionItem item = { MHD_OPTION_URI_LOG_CALLBACK, (intptr_t) callback, cls };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_notify_completed(MHD_RequestCompletedCallback callback, void *cls)
{
    struct MHD_OptionItem item = { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t) callback, cls };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_notify_connection(MHD_NotifyConnectionCallback callback, void *cls)
{
    struct MHD_OptionItem item = { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t) callback, cls };
    return item;
}

static inline struct MHD_OptionItem
CMicroHTTPD_option_end(void)
{
    struct MHD_OptionItem item = { MHD_OPTION_END, 0, NULL };
    return item;
}

/* MHD_get_daemon_info, MHD_get_connection_info and MHD_set_connection_option
   are variadic too; these fixed-arity wrappers ask for one thing each. */
static inline uint16_t
CMicroHTTPD_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

static inline int
CMicroHTTPD_connection_fd(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

static inline const struct sockaddr *
CMicroHTTPD_client_address(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}

static inline enum MHD_Result
CMicroHTTPD_set_connection_timeout(struct MHD_Connection *connection, unsigned int seconds)
{
    return MHD_set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}
#endif
