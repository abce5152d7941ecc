#!/bin/sh
# Write the .env that docker-compose.yml reads: a random password for PostgreSQL's superuser,
# for every database login and for every NATS user. An existing file is kept: the database
# volume keeps the passwords it was first started with.
#
#   deploy/compose/secrets.sh            # writes .env at the top of the repository
#   deploy/compose/secrets.sh FILE       # writes FILE instead
set -eu
target=${1:-"$(dirname "$0")/../../.env"}
if [ -e "$target" ]; then
    echo "$target exists: kept" >&2
    exit 0
fi
secret() {
    LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 32
}
umask 077
{
    echo "POSTGRES_PASSWORD=$(secret)"
    for login in MIGRATE RELAY WATCHER SCHEDULER DISRUPTION TERMINATION AUDIT; do
        echo "DB_PASSWORD_$login=$(secret)"
    done
    for user in RELAY SCHEDULER WATCHER DISRUPTION TERMINATION SIM CLI SETUP; do
        echo "NATS_PASSWORD_$user=$(secret)"
    done
} >"$target"
echo "wrote $target" >&2
