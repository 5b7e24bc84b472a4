"""teams and apps: a nullable cost_centre (an app's overrides its team's)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 07:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both databases (SQLite >= 3.35 drops a column in place): a batch copy of ``teams``
# would drop the table ``apps`` references and trip its foreign key.


def upgrade() -> None:
    for table in ('teams', 'apps'):
        op.add_column(table, sa.Column('cost_centre', sa.String(length=200), nullable=True))


def downgrade() -> None:
    for table in ('apps', 'teams'):
        op.drop_column(table, 'cost_centre')
