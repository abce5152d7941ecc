#!/bin/sh
# Run once by the postgres image on an empty data directory (/docker-entrypoint-initdb.d), as the
# superuser: the roles and logins of postgres-roles.sql, each login's password from the
# environment docker-compose.yml gives this container (deploy/compose/secrets.sh makes them).
# NODEWRIGHT_ROLES_SQL: the roles file, when it is not where compose mounts it (tests).
set -eu
psql --no-psqlrc --username "$POSTGRES_USER" --dbname postgres \
    --set=db="$POSTGRES_DB" \
    --set=migrate_password="$DB_PASSWORD_MIGRATE" \
    --set=relay_password="$DB_PASSWORD_RELAY" \
    --set=watcher_password="$DB_PASSWORD_WATCHER" \
    --set=scheduler_password="$DB_PASSWORD_SCHEDULER" \
    --set=disruption_password="$DB_PASSWORD_DISRUPTION" \
    --set=termination_password="$DB_PASSWORD_TERMINATION" \
    --set=audit_password="$DB_PASSWORD_AUDIT" \
    --file "${NODEWRIGHT_ROLES_SQL:-/etc/nodewright/postgres-roles.sql}"
