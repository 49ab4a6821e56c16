#!/bin/sh
# Patroni runs this once, on the node that creates the cluster, right after
# initdb, with a superuser connection string as its only argument (see
# post_bootstrap in patroni.yml). It creates the role the service logs in as,
# with the password in HA_WALLET_PASSWORD, and the database `wallet` that the
# role owns. The service's migrations create everything inside it: schema
# wallet, and public.schema_migrations and public.schema_functions, which an
# owner may create in PostgreSQL 15. They use no extension, so nothing here
# needs to run as superuser beyond these two statements.
#
# Then it creates the pgBackRest stanza `wallet` in the repository the
# node's configuration (HA_BACKUP_CONFIG) names, so that archive_command
# succeeds from the first segment on. pgBackRest connects with the password
# file Patroni gives this script (PGPASSFILE).
set -eu
: "${HA_WALLET_PASSWORD:?HA_WALLET_PASSWORD must be set}"
: "${HA_BACKUP_CONFIG:?HA_BACKUP_CONFIG must be set}"
# \getenv keeps the password off psql's command line.
/usr/lib/postgresql/15/bin/psql "$1" --no-psqlrc --quiet -v ON_ERROR_STOP=1 <<'SQL'
\getenv wallet_password HA_WALLET_PASSWORD
CREATE ROLE wallet LOGIN PASSWORD :'wallet_password';
CREATE DATABASE wallet OWNER wallet;
SQL
exec pgbackrest --config="$HA_BACKUP_CONFIG" --stanza=wallet stanza-create
