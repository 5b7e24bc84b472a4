"""budgets.spend_per_hour: the fast spend bucket of a key or team scope (decimal string)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 07:05:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('budgets') as batch:
        batch.add_column(sa.Column('spend_per_hour', sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('budgets') as batch:
        batch.drop_column('spend_per_hour')
