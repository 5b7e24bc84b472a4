"""prices.reserved_hour, prices.reserved_month, prices.reserved_team: provisioned capacity, a flat charge to a team

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 23:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('prices') as batch:
        batch.add_column(sa.Column('reserved_hour', sa.String(length=40), nullable=True))
        batch.add_column(sa.Column('reserved_month', sa.String(length=40), nullable=True))
        batch.add_column(sa.Column('reserved_team', sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('prices') as batch:
        batch.drop_column('reserved_team')
        batch.drop_column('reserved_month')
        batch.drop_column('reserved_hour')
